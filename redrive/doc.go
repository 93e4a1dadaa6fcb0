// Package redrive moves messages from a dead-letter queue back to the queue
// it serves, for `worker redrive`.
//
// Move is a loop of receive, send and delete, ten messages at a time. Each
// message is sent to the source queue before it is deleted from the
// dead-letter queue, so an interrupted move never loses one: a crash between
// the two leaves a copy in both queues, a duplicate delivery that the
// message's claim absorbs. The copy keeps the body and the message
// attributes, except the worker's DeadLetterReason, which described the
// last failure and not the next; it keeps OriginalMessageId, and a message
// SQS dead-lettered itself (which kept its id) gets its id there, signed
// with Options.Secret (package origin), so a key taken from the message id
// survives the move (SQS gives a moved message a new id). A message sent
// to the dead-letter queue directly is moved only when its
// OriginalMessageId verifies: the rest are left and named (Result.Unverified,
// Result.Unkeyed; Options.MoveUnkeyed moves the unkeyed).
//
// Count is the dry run: it receives every message with a short visibility,
// counts them by DeadLetterReason, and makes them visible again at once.
//
// StartNative uses SQS's own StartMessageMoveTask instead: one call, the
// move done by SQS at up to 500 messages a second, but whole messages:
// DeadLetterReason stays, a message without OriginalMessageId loses its id,
// and there is no count limit. It answers ErrNativeUnsupported from an
// endpoint that does not implement it (the emulator), so that the caller
// can fall back to Move.
package redrive
