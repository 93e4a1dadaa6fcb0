// Package claimstore defines the claim protocol that turns an at-least-once
// queue into exactly-once effects: before doing a message's work, a consumer
// claims the message's idempotency key with a write only one caller can win,
// holds the claim on a lease, and afterwards completes or releases it.
//
// A claim moves through three states:
//
//	(absent) --Acquire--> IN_PROGRESS --Complete--> COMPLETED
//	                          |  ^
//	                  Release |  | Acquire (takeover: released, lease expired,
//	                          v  |          or row past its expiry)
//	                       RELEASED
//
// Every acquisition increments the claim's fencing token. Renew, Complete and
// Release are conditioned on the token the caller holds, so a holder that was
// taken over (it stalled past its lease) fails with ErrLeaseLost instead of
// overwriting the new holder's state. A row whose ExpiresAt has passed counts
// as absent, whatever its state, because TTL deletion lags.
//
// Store is the contract; the packages under claimstore are its stores and
// their tools:
//
//   - memory: the Store in one process (tests, the demo, the simulator).
//   - dynamo: the Store on a DynamoDB table, one conditional write per
//     operation.
//   - postgres: the Store on a PostgreSQL table, the database's clock
//     deciding, with a sweeper for expired rows in place of a TTL.
//   - cache: not a store of its own but a bounded cache of completed keys
//     in front of any Store, answering duplicates without a request.
//   - claimstoretest: the conformance suite every Store passes (memory,
//     dynamo, postgres, and cache in front of them); run it on yours.
//
// TxCompleter is an optional capability: a store that can commit a caller's
// own writes in one transaction with a completion, fenced by the claim's
// condition (dynamo, with TransactWriteItems; postgres, in one SQL
// transaction). CompleteTx uses it, or fails with ErrTxUnsupported (the
// memory store) rather than complete the claim without the writes.
//
// # For store authors
//
// Beside the contract, the package exports what every backend must do
// alike, so that a store written outside this module (which internal
// packages cannot serve) behaves as dynamo, postgres and memory do, and
// passes claimstoretest: the params' Check methods and CheckKey refuse a
// call as every store does; NewClaim and Claim's Decide, Takeover,
// Takeable, Blocked and Live are the protocol's decisions on a row;
// RenewParams.RenewExpiry and ForceCompleteParams.Expiry are the expiry a
// write stores; StoredKey and KeySeparator are a prefixed store's key;
// TruncateLastError and the Max*Bytes limits are what a row holds;
// ExpirySeconds and LeaseMillis are the stored instants' units; NewAcq is a
// new acquisition id; ReadForRepair is the read every Admin repair starts
// with; OmittedResult is the marker of a result too large to store. A
// program that only uses a store needs none of them.
//
// The repository's docs/protocol.md is the reference for the stored row
// (every attribute with its DynamoDB type and unit), each write's exact
// condition, and the state diagram; docs/runbook.md says how to inspect and
// repair a claim in production.
package claimstore
