"""conccl for PyTorch: the NCCL drop-in launcher (`conccl run`, `conccl info`) and the fused ops (`conccl.torch`).

The package holds conccl's shared libraries in conccl/lib/ (built by `pip install .`); CONCCL_LIB_DIR points at
another directory holding them (a build tree, or libraries carried to a machine without the package built).
docs/pytorch.md.
"""
from ._libs import LIBRARIES, find_library, lib_dir

__version__ = "0.1.0"
__all__ = ["LIBRARIES", "find_library", "lib_dir", "__version__"]
