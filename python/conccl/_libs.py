"""Where conccl's shared libraries are: CONCCL_LIB_DIR if set, else the package's own lib/ directory.

Pure path logic (no ctypes, no torch), so the launcher and the tests can use it anywhere.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

# Logical name -> file name. The package build installs them without version suffixes (CONCCL_PYTHON_PACKAGE);
# a normal CMake build tree has the same file names (libconccl.so being a link there).
LIBRARIES = {
    "conccl": "libconccl.so",
    "nccl_shim": "libconccl_nccl.so",
    "ops": "libconccl_ops.so",
}

ENV_LIB_DIR = "CONCCL_LIB_DIR"


def lib_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The directory the libraries are taken from: $CONCCL_LIB_DIR, else <package>/lib."""
    environ = os.environ if environ is None else environ
    override = environ.get(ENV_LIB_DIR)
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parent / "lib"


def find_library(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Absolute path of library `name` (a key of LIBRARIES), or None when it is not there (e.g. a package built
    without CUDA has no drop-in and no ops library)."""
    path = lib_dir(environ) / LIBRARIES[name]
    return path if path.is_file() else None
