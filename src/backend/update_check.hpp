// Plain UPDATEs of guarded tables judged in their own projection, in place
// of the BEFORE row trigger (update_check.cpp explains how and when).
#pragma once

namespace pg_fencing {

// Defines pg_fencing.fast_update and installs the planner and executor
// hooks; called from _PG_init.
void RegisterUpdateCheck();

}  // namespace pg_fencing
