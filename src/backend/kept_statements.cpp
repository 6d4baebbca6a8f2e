// See kept_statements.hpp.
#include "kept_statements.hpp"

extern "C" {
#include "common/hashfn.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"  // CURSOR_OPT_GENERIC_PLAN
#include "utils/memutils.h"
}

#include <cstring>

namespace pg_fencing {
namespace {

struct KeptStatement {
  uint32 hash;       // of the text
  const char *text;  // in TopMemoryContext
  int count;
  const Oid *types;  // count of them, in TopMemoryContext
  SPIPlanPtr plan;   // kept (SPI_keepplan)
};

// This backend's kept statements; plain data, so that an ERROR anywhere
// leaves it whole (an entry is added only once its plan is kept).
KeptStatement kept[kMaxKeptStatements];
int kept_count = 0;

const KeptStatement *Find(uint32 hash, const char *query, int count, const Oid *types) {
  for (int i = 0; i < kept_count; ++i) {
    const KeptStatement &k = kept[i];
    if (k.hash == hash && k.count == count && strcmp(k.text, query) == 0 &&
        (count == 0 || memcmp(k.types, types, sizeof(Oid) * count) == 0)) {
      return &k;
    }
  }
  return nullptr;
}

}  // namespace

int ExecuteKept(const char *query, int count, Oid *types, Datum *values, const char *nulls,
                bool read_only, long limit) {
  const uint32 hash =
      hash_bytes(reinterpret_cast<const unsigned char *>(query), static_cast<int>(strlen(query)));
  const KeptStatement *found = Find(hash, query, count, types);
  if (found == nullptr) {
    if (kept_count == kMaxKeptStatements) {
      return SPI_execute_with_args(query, count, types, values, nulls, read_only, limit);
    }
    // A generic plan, made once: the engine's statements look rows up by
    // key, where a plan for the values at hand is no better, and planning
    // their joins anew on each call was most of their cost.
    SPIPlanPtr plan = SPI_prepare_cursor(query, count, types, CURSOR_OPT_GENERIC_PLAN);
    if (plan == nullptr) {
      elog(ERROR, "pg_fencing: preparing an engine statement failed: %s",
           SPI_result_code_string(SPI_result));
    }
    if (SPI_keepplan(plan) != 0) elog(ERROR, "pg_fencing: keeping an engine statement failed");
    KeptStatement &k = kept[kept_count];
    k.hash = hash;
    k.text = MemoryContextStrdup(TopMemoryContext, query);
    Oid *kept_types =
        static_cast<Oid *>(MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * Max(count, 1)));
    if (count > 0) memcpy(kept_types, types, sizeof(Oid) * count);
    k.types = kept_types;
    k.count = count;
    k.plan = plan;
    ++kept_count;
    found = &k;
  }
  return SPI_execute_plan(found->plan, values, nulls, read_only, limit);
}

}  // namespace pg_fencing
