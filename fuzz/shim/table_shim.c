/*
 * table_shim.c - a minimal HSA tool for the in-process fuzz targets (fuzz/src/interceptor.rs).
 *
 * hsa-emu offers its live API table only to tool libraries (HSA_TOOLS_LIB, or a loaded
 * library exporting HSA_AMD_TOOL_PRIORITY), never to the main program. The fuzz binary sets
 * HSA_TOOLS_LIB to this library before hsa_init; OnLoad keeps the table pointer, and the fuzz
 * binary reads it back (dlsym) and installs rocprof-replay into it itself, exactly as a tool's
 * OnLoad would, before it creates a queue or loads a code object.
 */
#include <stdbool.h>
#include <stdint.h>

__attribute__((visibility("default"))) void* rocprof_replay_fuzz_table = 0;

__attribute__((visibility("default"))) bool OnLoad(void* table, uint64_t runtime_version,
                                                   uint64_t failed_tool_count,
                                                   const char* const* failed_tool_names) {
    (void)runtime_version;
    (void)failed_tool_count;
    (void)failed_tool_names;
    __atomic_store_n(&rocprof_replay_fuzz_table, table, __ATOMIC_RELEASE);
    return true;
}
