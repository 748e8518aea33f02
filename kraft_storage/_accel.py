"""Transitional alias of :mod:`kraft_storage.accel` (the native chooser's public name).

The same module object (so ``FALLBACKS`` and the process's choice are shared, and
there is still one chooser); it lets modules being edited elsewhere switch to the
public name in their own commits.  Removed once nothing imports it (issue 20)."""
import sys

from kraft_storage import accel

sys.modules[__name__] = accel
