// Package cache puts a local cache of completed keys in front of a
// claimstore.Store (Powertools' use_local_cache): a duplicate of a key this
// process saw completed is answered from memory, without a request to the
// backend. On DynamoDB a duplicate otherwise costs a failed conditional
// write, which is billed as a write; under an at-least-once queue that
// delivers often twice, the cache saves most of them (`make bench` shows
// how many).
//
// It only ever answers for a key it saw completed: one this process
// completed (Complete or CompleteTx succeeded for an acquisition it made),
// or one the store itself reported as a duplicate. Every other Acquire, and
// every Renew, Release and Get, goes to the store. Entries are bounded in
// number (least recently used first out) and in time: TTL, and never past
// the row's own expiry, so the cache forgets a key no later than the store.
//
// What it cannot see: an operator's repair of a completed row (claims
// forget, a forced completion) in another process is answered from the
// old entry until the entry's TTL ends. Keep the TTL short where operators
// repair completed claims, or restart the workers after such a repair.
package cache
