/*
 * The C sources of the _batch extension as one translation unit.
 *
 * _batch needs the CRC-32C kernels, which the _crc32c extension compiles
 * too.  Two extensions naming the same source file share one object file
 * path under build/, and setup.py builds extensions in parallel: they would
 * race writing it.  Including the sources here gives _batch its own object.
 */
#include "crc32c.c"
#include "recordbatch.c"
