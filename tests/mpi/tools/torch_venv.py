"""The Python of the tests that compare autoddl with PyTorch (torch, transformers, safetensors).

torch_or_skip(root) returns where this Python imports all three; otherwise it runs the calling
script again, with the same arguments, under root/.venv/bin/python (scripts/setup-python makes
it), and where that is missing or lacks them too, prints why and exits 77 (meson: skipped).
"""
import os
import sys


def torch_or_skip(root):
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError as e:
        reason = str(e)
    venv = os.path.join(root, ".venv", "bin", "python")
    if os.path.exists(venv) and not os.environ.get("AUTODDL_TEST_IN_VENV"):
        os.environ["AUTODDL_TEST_IN_VENV"] = "1"
        os.execv(venv, [venv, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
    print(f"skipped: torch and transformers are needed ({reason}); scripts/setup-python makes {venv}")
    sys.exit(77)
