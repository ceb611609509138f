#pragma once
// Data members of a struct named once, so that sums, scalings and comparisons over them are
// written once and a new member is added in one place. for_each calls f with each member pointer
// in the order listed, as a fold (no loop to unroll):
//   using terms = member_list<&point::x, &point::y>;
//   terms::for_each([&](auto m) { a.*m += b.*m; });   // a.x += b.x; a.y += b.y;
// A list built on another (append) keeps the other's members first and in its order.
namespace autoddl {

template <auto... Members>
struct member_list {
  static constexpr int size = int(sizeof...(Members));

  template <class F>
  static constexpr void for_each(F&& f) {
    (f(Members), ...);
  }

  template <auto... More>
  using append = member_list<Members..., More...>;
};

}  // namespace autoddl
