// Package origin signs and checks the OriginalMessageId message attribute:
// the id a message first arrived with, which the worker writes when it
// dead-letters a message and `worker redrive` (package redrive) keeps when
// it moves the message back. A key taken from the message id is the
// original id of a redriven message, so whoever could write that
// attribute could choose another message's key (and have it acked as a
// duplicate, unprocessed). The attribute is believed only with a valid
// HMAC-SHA256, made with a secret only the worker and the redrive hold,
// over the id, the first receipt time and the body; the MAC is carried in
// the attribute's value ("<id>.<base64url MAC>"), so it costs no
// attribute of SQS's ten.
//
// A program that moves dead letters by its own means keeps the attribute
// as it is, with the body unchanged, and may use Verify to tell the
// worker's dead letters from messages sent to the dead-letter queue by
// anyone else, and Sign to key a message that SQS dead-lettered itself.
package origin
