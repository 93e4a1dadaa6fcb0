// Package keyexpr finds a message's idempotency key and fingerprint in its
// JSON payload by JMESPath expressions, as Powertools for AWS Lambda's
// event_key_jmespath and payload_validation_jmespath do, with the
// expressions users of those libraries already write.
//
// The key expression's value is the key: a string as it is, a number its
// JSON text as the payload writes it, a multi-select ("[customer_id,
// order_id]") its compact JSON. Numbers are never rounded through float64:
// 9007199254740993 and 9007199254740992 are two keys, and so are 1 and 1.0
// (two texts); expressions still compare numbers by value, as JMESPath
// says. A string is its own text, so it shares a key with the value whose
// JSON text it holds ("1" and 1, "[\"a\"]" and ["a"]): a producer that
// turns an id from a number into a string keeps its keys. A number out of
// float64's range, or a value the expression cannot give exactly (to_string
// of a number that float64 does not hold), is poison (ErrNumber, naming the
// expression), never a rounded key. Null, an empty string or an empty list
// is a missing key: a *MissingKeyError naming the expression, which the
// worker dead-letters as poison. The fingerprint expression's value is hashed (canonical JSON,
// SHA-256): the same key arriving with another value there is a key reused
// for another payload, not a duplicate.
//
// The expressions search the message as published. A message taken out of
// an envelope (an SNS notification, an EventBridge event: see package
// envelope) is searched without it, so "id" on an EventBridge event is the
// "id" in its detail. An expression that starts with $body (BodyRoot)
// searches the body as it was delivered, envelopes and all: "$body.id" is
// the event's own id. ExtractInput takes both; for a message that came in
// no envelope, $body is the payload.
//
// A JSON document held in a string (an SQS body inside a Lambda event, an
// SNS "Message") is read with powertools_json, as in Powertools:
// "powertools_json(body).order_id". The call applies to one value: it
// starts the expression or follows a '.', and what follows it is searched
// in the decoded document; it is not available inside projections or as
// another function's argument. Expressions are compiled by
// github.com/jmespath/go-jmespath, the implementation the AWS SDKs use.
//
// The worker takes an Expr as a Decoder (worker.KeyFromJMESPath), the
// binary as IDEMPOTENCY_KEY_FROM=jmespath:EXPR, and a caller of package
// once passes Extract's key and fingerprint to once.Do.
package keyexpr
