"""Transitional alias of :mod:`kraft_storage.messages.runtime` (the codec runtime's public name).

Only the native extensions built before the rename import this name; it is the
same module object, so classes and state are shared.  Removed with the next
native build (issue 20)."""
import sys

from kraft_storage.messages import runtime

sys.modules[__name__] = runtime
