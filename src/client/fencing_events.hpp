// The payloads of channel fencing_events, as far as a watch needs them.
// Internal to the client library (watch.cpp); the integration tests include
// it to check it without a server.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pg_fencing::client {

// The name of the channel the extension announces lease events on.
inline constexpr const char kFencingEventsChannel[] = "fencing_events";

// The string value of the top-level member "lock_name" of a JSON object.
// nullopt when the payload is not a JSON object this can read, or has no
// such member (a payload too long for NOTIFY is sent without it), or it is
// not a string.  A watch reads the lock's state again unless this names
// another lock: anything it cannot read may concern it.
std::optional<std::string> EventLockName(std::string_view payload);

}  // namespace pg_fencing::client
