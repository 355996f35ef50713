// libcallgrind_toggle.so: callgrind's collect toggle and dump as plain C functions, so
// glue_python.py (ctypes) can bracket its timed loops the way glue_count.cpp does. No-ops
// outside valgrind.

#include <valgrind/callgrind.h>

extern "C" {

/// Turns collection on when off, off when on (CALLGRIND_TOGGLE_COLLECT).
void customop_callgrind_toggle_collect() { CALLGRIND_TOGGLE_COLLECT; }

/// Writes the counts so far to a dump named `name`, then zeroes them.
void customop_callgrind_dump(const char* name) { CALLGRIND_DUMP_STATS_AT(name); }

/// Starts instrumentation (under --instr-atstart=no).
void customop_callgrind_start() { CALLGRIND_START_INSTRUMENTATION; }
}
