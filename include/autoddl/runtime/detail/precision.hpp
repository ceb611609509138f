#pragma once
// Mixed precision as the executor runs it: a trainer of a 16-bit element type T keeps parameters
// and activations in T, and in master_t<T> (float) the master copy of the parameters it updates,
// their optimizer state and the gradients it sums over micro-batches. The collectives of
// activations and parameters move T, those of the gradient sums the sums' type (fp32, or T with
// 16-bit sums: gradient_accumulator.hpp), as the plan prices them. For float and double master_t<T>
// is T and nothing is converted.
#include <cmath>
#include <span>
#include <type_traits>
#include <utility>

#include "autoddl/backend/device.hpp"

namespace autoddl::detail {

/// The type of master weights, optimizer state and gradient sums of a trainer of T: the type
/// the device keeps T's row statistics in (float for the 16-bit types, T otherwise).
template <class T>
using master_t = statistic_t<T>;

/// Whether a trainer of T keeps master weights apart from its parameters.
template <class T>
inline constexpr bool mixed_precision_v = !std::is_same_v<master_t<T>, T>;

/// A device that converts between T and master_t<T>: y[i] = x[i] in y's type (rounded to
/// nearest even when narrowing, exact when widening).
template <class D, class T>
concept ConvertsFor = requires(D& d, std::span<const T> x, std::span<master_t<T>> wx, std::span<const master_t<T>> w,
                               std::span<T> y) {
  d.convert(x, wx);
  d.convert(w, y);
};

/// A copy of x in U (rounded to nearest even when U is narrower).
template <class U, class T, Device D>
buffer_t<D, U> converted_copy(D& dev, const buffer_t<D, T>& x) {
  buffer_t<D, U> y = dev.template alloc<U>(x.size());
  if constexpr (std::is_same_v<U, T>) {
    dev.copy(std::as_const(dev).view(x), dev.view(y));
  } else {
    static_assert(ConvertsFor<D, std::conditional_t<std::is_same_v<master_t<T>, U>, T, U>>,
                  "mixed-precision training needs the device's convert primitive between the 16-bit type and float");
    dev.convert(std::as_const(dev).view(x), dev.view(y));
  }
  return y;
}
/// x in U: x itself (moved) where U is its type, else a converted copy (x freed).
template <class U, class T, Device D>
buffer_t<D, U> converted(D& dev, buffer_t<D, T>&& x) {
  if constexpr (std::is_same_v<U, T>) {
    return std::move(x);
  } else {
    buffer_t<D, U> y = converted_copy<U, T>(dev, x);
    x = buffer_t<D, T>{};
    return y;
  }
}

/// A dynamic loss scale (Micikevicius et al. 2018, "Mixed Precision Training", as Megatron-LM's
/// and apex's dynamic scalers do it): the loss gradient is multiplied by `scale` so that small
/// fp16 gradients stay representable, and the gradients are divided by it before the update. A
/// step whose gradients hold NaN or Inf (an overflow) is skipped and the scale halved; after
/// `window` clean steps in a row it doubles. Off where scale is 0.
/// Example: scale 65536, window 2: clean, clean -> 131072; overflow -> 65536, skipped.
struct dynamic_loss_scale {
  double scale = 0;
  int window = 1000;
  int clean = 0;          ///< clean steps since the last change
  double applied = 0;     ///< the scale of the last step's gradients
  bool skipped = false;   ///< whether the last step was skipped
  double seed = 1;        ///< this step's loss gradient factor
  bool on() const { return scale > 0; }
  /// A step starts: its loss gradient is scaled (infinite where `overflow` injects one).
  void begin_step(bool overflow) { seed = overflow ? INFINITY : on() ? scale : 1; }
  /// Records a step's outcome; returns whether its update runs (its gradients are finite).
  bool after_step(bool finite) {
    applied = scale;
    skipped = !finite;
    if (!finite) {
      scale /= 2;
      clean = 0;
    } else if (++clean == window) {
      scale *= 2;
      clean = 0;
    }
    return finite;
  }
};

}  // namespace autoddl::detail
