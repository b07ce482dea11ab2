# What the two compiled handles share (the Timer core's TimerHandle, _ctimercore.pyx, and the
# loop core's LoopTimerHandle, _cloopcore.pyx; no module of its own): their flags, in their
# entry's c_flags (the bits the wheel leaves to subclasses), and the reading and writing of the
# cancelled one. cancel() was called (asyncio's _cancelled field); _context is the core's shared
# snapshot (the callback runs in a copy of it); _arguments is the one argument itself, not a
# tuple. A core's own flags start at _FIRST_CORE_FLAG. The functions are inline: compiled into
# each handle's part, as if written there.

from aiowheel._cwheel cimport _FIRST_SUBCLASS_FLAG, Entry


cdef enum:
    _CANCELLED = _FIRST_SUBCLASS_FLAG
    _COPY_CONTEXT = _FIRST_SUBCLASS_FLAG << 1
    _ONE_ARG = _FIRST_SUBCLASS_FLAG << 2
    _FIRST_CORE_FLAG = _FIRST_SUBCLASS_FLAG << 3


cdef inline bint _is_cancelled(Entry handle) noexcept:
    """cancelled(), and asyncio's _cancelled field read."""
    return handle.c_flags & _CANCELLED != 0


cdef inline void _set_cancelled(Entry handle, bint value) noexcept:
    """asyncio's _cancelled field written."""
    if value:
        handle.c_flags |= _CANCELLED
    else:
        handle.c_flags &= ~(<unsigned int>_CANCELLED)
