// The fencing_token type: text and binary I/O and casts from integers.
//
// Comparison, hashing and min/max reuse PostgreSQL's int8 functions (see
// extension/pg_fencing--1.0.sql): the on-disk and in-memory form of a token
// is exactly an int8 Datum, so there is nothing to reimplement there.
#include "boundary.hpp"

extern "C" {
#include "libpq/pqformat.h"
#include "utils/builtins.h"
}

namespace pg_fencing {
namespace {

[[noreturn]] void ReportOutOfRange(const char *what_was_given) {
  ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
                  errmsg("value \"%s\" is out of range for type fencing_token", what_was_given),
                  errhint("Fencing tokens are integers from 0 to 9223372036854775807.")));
  pg_unreachable();
}

Datum TokenFromInt64(int64 value) {
  if (!IsValidToken(value)) {
    char text[32];
    snprintf(text, sizeof text, INT64_FORMAT, value);
    ReportOutOfRange(text);
  }
  return Int64GetDatum(value);
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PG_FUNCTION_INFO_V1(fencing_token_in);
Datum fencing_token_in(PG_FUNCTION_ARGS) {
  const char *text = PG_GETARG_CSTRING(0);
  const ParseResult result = PGF_CORE(ParseToken(text));
  switch (result.status) {
    case ParseStatus::kOk:
      break;
    case ParseStatus::kOutOfRange:
      ReportOutOfRange(text);
    case ParseStatus::kInvalidSyntax:
      ereport(ERROR, (errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
                      errmsg("invalid input syntax for type fencing_token: \"%s\"", text),
                      errhint("A fencing token is written as a decimal integer from 0 to "
                              "9223372036854775807, without sign or fraction.")));
  }
  PG_RETURN_INT64(result.value);
}

PG_FUNCTION_INFO_V1(fencing_token_out);
Datum fencing_token_out(PG_FUNCTION_ARGS) {
  const Token token = PG_GETARG_INT64(0);
  char *text = static_cast<char *>(palloc(kTokenTextBufferSize));
  PGF_CORE(FormatToken(token, text));
  PG_RETURN_CSTRING(text);
}

// Binary form: 8 bytes in network order, the same as int8's.
PG_FUNCTION_INFO_V1(fencing_token_recv);
Datum fencing_token_recv(PG_FUNCTION_ARGS) {
  StringInfo buf = reinterpret_cast<StringInfo>(PG_GETARG_POINTER(0));
  const int remaining = buf->len - buf->cursor;
  if (remaining != 8) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                    errmsg("invalid binary fencing_token: expected 8 bytes, got %d", remaining)));
  }
  return TokenFromInt64(pq_getmsgint64(buf));
}

PG_FUNCTION_INFO_V1(fencing_token_send);
Datum fencing_token_send(PG_FUNCTION_ARGS) {
  StringInfoData buf;
  pq_begintypsend(&buf);
  pq_sendint64(&buf, PG_GETARG_INT64(0));
  PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

PG_FUNCTION_INFO_V1(fencing_token_from_int8);
Datum fencing_token_from_int8(PG_FUNCTION_ARGS) { return TokenFromInt64(PG_GETARG_INT64(0)); }

PG_FUNCTION_INFO_V1(fencing_token_from_int4);
Datum fencing_token_from_int4(PG_FUNCTION_ARGS) { return TokenFromInt64(PG_GETARG_INT32(0)); }

}  // extern "C"
