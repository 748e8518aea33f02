"""Build script for kraft's native extensions.

Every extension is a Cython module (``*.pyx``) that wraps C kernels in
``csrc/``.  Each native module has a pure-Python twin with the same API; the
twin is chosen at import time when the extension is missing or when
``KRAFT_NO_EXTENSIONS=1`` is set (see ``kraft_storage/accel.py``).

Developer conveniences (not needed by users):

* ``KRAFT_EXT_ONLY=name1,name2`` builds only the named extensions (short
  names, e.g. ``_crc32c``) so parallel work does not rebuild everything.
* ``KRAFT_DEBUG_BUILD=1`` compiles with ``-O0 -g`` and asserts enabled.
"""
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext


class build_ext(_build_ext):
    """Compile extensions in parallel (one job per core) unless told otherwise, after the
    shared C library (``build_clib``: ``build_ext --inplace`` alone would not build it)."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self):
        if self.distribution.has_c_libraries():
            self.run_command("build_clib")
        super().run()

DEBUG = os.environ.get("KRAFT_DEBUG_BUILD") == "1"

if sys.platform == "win32":  # pragma: no cover - not a supported platform yet
    CFLAGS = ["/O2"]
else:
    CFLAGS = ["-O0", "-g"] if DEBUG else ["-O3"]
    CFLAGS += ["-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]

INCLUDES = ["csrc", numpy.get_include()]
MACROS = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]


def ext(name, pyx, csources=(), depends=(), libraries=()):
    return Extension(
        name,
        sources=[pyx, *csources],
        depends=list(depends),
        include_dirs=INCLUDES,
        define_macros=MACROS,
        extra_compile_args=CFLAGS,
        libraries=list(libraries),
    )


# The C kernels that several extensions call (CRC-32C, the record-batch scanner and
# codec) are compiled once, into one static library linked by each of them.
# Extensions are compiled in parallel, so no C file may be listed by two extensions
# (they would race on its object file, build/temp.../csrc/X.o); a C file used by one
# extension only may stay in its sources.  The library's objects are position
# independent (build_clib compiles with the extension compiler's flags, -fPIC
# included), and each extension gets its own copy of what it calls, as before.
CSRC_LIB = "kraft_csrc"
CSRC_LIB_SOURCES = ["csrc/crc32c.c", "csrc/recordbatch.c"]
CSRC_LIB_DEPENDS = [*CSRC_LIB_SOURCES, "csrc/crc32c.h", "csrc/recordbatch.h"]
LIBRARIES = [(CSRC_LIB, {
    "sources": CSRC_LIB_SOURCES,
    "include_dirs": ["csrc"],
    "cflags": CFLAGS,
    "obj_deps": {"": ["csrc/crc32c.h", "csrc/recordbatch.h"]},
})]

# (module, pyx, C sources of its own, the shared library if it calls it).
EXTENSIONS = [
    ext("kraft_storage._native._crc32c", "kraft_storage/_native/_crc32c.pyx",
        depends=CSRC_LIB_DEPENDS, libraries=[CSRC_LIB]),
    ext("kraft_storage._native._batch", "kraft_storage/_native/_batch.pyx",
        depends=CSRC_LIB_DEPENDS, libraries=[CSRC_LIB]),
    ext("kraft_storage._native._messages_metadata", "kraft_storage/_native/_messages_metadata.pyx"),
    ext("kraft_storage._native._timeline", "kraft_storage/_native/_timeline.pyx"),
    ext("kraft_storage._native._index", "kraft_storage/_native/_index.pyx"),
    ext("kraft_storage._native._frame", "kraft_storage/_native/_frame.pyx"),
    ext("kraft_storage._native._logappend", "kraft_storage/_native/_logappend.pyx",
        depends=CSRC_LIB_DEPENDS, libraries=[CSRC_LIB]),
    ext("kraft_storage._native._fdsync", "kraft_storage/_native/_fdsync.pyx",
        ["csrc/aio_fsync.c"], depends=["csrc/aio_fsync.h"]),
    ext("kraft_storage._native._metadata_columns", "kraft_storage/_native/_metadata_columns.pyx"),
    # the generated RPC codecs on the Raft hot path (they include kraft_storage/_native/*.pxi)
    ext("kraft_node._native._rpc_headers", "kraft_node/_native/_rpc_headers.pyx"),
    ext("kraft_node._native._rpc_fetch", "kraft_node/_native/_rpc_fetch.pyx"),
    ext("kraft_node._native._placement", "kraft_node/_native/_placement.pyx"),
    ext("kraft_node._native._bulk_objects", "kraft_node/_native/_bulk_objects.pyx"),
    ext("kraft_node._native._image_bulk", "kraft_node/_native/_image_bulk.pyx"),
    ext("kraft_node._native._partition_fold", "kraft_node/_native/_partition_fold.pyx"),
    ext("kraft_node._native._topics_map", "kraft_node/_native/_topics_map.pyx", depends=["csrc/pmap.h"]),
    ext("kraft_node._native._metadata_encode", "kraft_node/_native/_metadata_encode.pyx"),
    ext("kraft_node._native._change_replay", "kraft_node/_native/_change_replay.pyx"),
]

only = {s.strip() for s in os.environ.get("KRAFT_EXT_ONLY", "").split(",") if s.strip()}
if only:
    EXTENSIONS = [e for e in EXTENSIONS if e.name.rsplit(".", 1)[-1] in only]

setup(
    cmdclass={"build_ext": build_ext},
    libraries=LIBRARIES,
    ext_modules=cythonize(
        EXTENSIONS,
        language_level=3,
        include_path=["kraft_storage/_native"],
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
        annotate=False,
    ),
)
