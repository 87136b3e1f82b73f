"""ref_llama.py - the former name of the NumPy reference, kept so that `import ref_llama as R`
goes on working: the reference is now generic (ref_model.py) with one declaration per
architecture (ref_arch_llama.py).

This module IS ref_model (an alias in sys.modules, not a copy of its names), so that a test
that replaces one of its functions (test_moe_oracle.py wraps R.route) changes what the
forward pass calls.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402

if __name__ == "__main__":
    import runpy

    runpy.run_module("ref_model", run_name="__main__")
else:
    sys.modules[__name__] = ref_model
