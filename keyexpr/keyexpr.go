package keyexpr

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmespath/go-jmespath"
)

// JSONFunction is the function an expression calls to read a JSON document
// held in a string (Powertools' powertools_json): "powertools_json(body).id".
const JSONFunction = "powertools_json"

// BodyRoot starts an expression that searches the message's body as it was
// delivered, envelopes and all, rather than the message as published:
// "$body.id" is an EventBridge event's own id where "id" is the "id" in its
// detail. Followed by '.', '|', '[' or nothing, as a field would be.
const BodyRoot = "$body"

var (
	// ErrMissingKey means the key expression found nothing usable in the
	// payload: null, an empty string, an empty list or object, or a list
	// with a null in it. The error is a *MissingKeyError.
	ErrMissingKey = errors.New("keyexpr: key missing from payload")
	// ErrPayload means the payload, or a string given to powertools_json,
	// is not JSON, or an expression failed on it.
	ErrPayload = errors.New("keyexpr: payload not searchable")
	// ErrNumber means an expression's value holds a number that cannot be
	// a key: out of float64's range, or one whose text the search cannot
	// tell (see the package documentation). It comes wrapped with
	// ErrPayload.
	ErrNumber = errors.New("keyexpr: number unfit for a key")
)

// MissingKeyError is the error of a payload in which the key expression
// found no key. It matches ErrMissingKey.
type MissingKeyError struct {
	// Expr is the key expression.
	Expr string
	// Found is what the expression found, as JSON ("null", `""`, "[]").
	Found string
}

// Error implements error.
func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("keyexpr: key expression %q found no key in the payload (found %s)", e.Expr, e.Found)
}

// Is reports whether target is ErrMissingKey.
func (e *MissingKeyError) Is(target error) bool { return target == ErrMissingKey }

// Config says where a payload's key and fingerprint are.
type Config struct {
	// Key is the JMESPath expression whose value is the idempotency key
	// (Powertools' event_key_jmespath): a string is the key as it is; a
	// number or boolean its JSON text, a number's as the payload writes it
	// (1.0 and 1 are two keys); a list or object (a multi-select such as
	// "[customer, order]") its compact JSON with sorted object keys. A
	// string and the value whose JSON text it holds share a key ("1" and
	// 1). It searches the message as published; one that starts with
	// BodyRoot ("$body.id") searches the body as delivered, in its
	// envelopes (see ExtractInput). Required.
	Key string
	// Fingerprint is the JMESPath expression whose value says what the
	// payload is (Powertools' payload_validation_jmespath): the fingerprint
	// is a hash of that value's canonical JSON, numbers as written, so the
	// same key with another value there is a key reused, not a duplicate.
	// Defaults to "": no fingerprint, any payload matches.
	Fingerprint string
}

// Expr is a compiled Config. It is safe for concurrent use.
type Expr struct {
	key, fingerprint string
	keyExpr, fpExpr  *compiled
}

// Extracted is what an Expr finds in a payload.
type Extracted struct {
	// Key is the idempotency key: never empty.
	Key string
	// Fingerprint is "sha256:" and the hash of the fingerprint expression's
	// value, or "" when the Config has no fingerprint expression.
	Fingerprint string
}

// New compiles c. Errors name the field whose expression does not compile.
func New(c Config) (*Expr, error) {
	var errs []error
	e := &Expr{key: c.Key, fingerprint: c.Fingerprint}
	if strings.TrimSpace(c.Key) == "" {
		errs = append(errs, errors.New("Key is required"))
	} else if k, err := compileRoot(c.Key); err != nil {
		errs = append(errs, fmt.Errorf("Key %q: %w", c.Key, err))
	} else {
		e.keyExpr = k
	}
	if c.Fingerprint != "" {
		f, err := compileRoot(c.Fingerprint)
		if err != nil {
			errs = append(errs, fmt.Errorf("Fingerprint %q: %w", c.Fingerprint, err))
		}
		e.fpExpr = f
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("keyexpr: %w", errors.Join(errs...))
	}
	return e, nil
}

// KeyExpr returns the key expression, for logs.
func (e *Expr) KeyExpr() string { return e.key }

// Input is a message for ExtractInput.
type Input struct {
	// Payload is the message as published: the JSON document the
	// expressions search. Required.
	Payload []byte
	// Body is the message as it was delivered, in the envelopes Payload
	// was taken out of (an SNS notification, an EventBridge event): the
	// document an expression that starts with BodyRoot searches. Defaults
	// to empty: Payload, which came in no envelope.
	Body []byte
}

// Extract finds the key and fingerprint in a JSON payload. Errors: a
// *MissingKeyError (ErrMissingKey) when the key is absent or empty;
// ErrPayload, wrapped, when the payload is not JSON, an expression fails on
// it, or its value holds a number that cannot be a key (ErrNumber). Both
// mean the payload can never yield a key: poison.
func (e *Expr) Extract(payload []byte) (Extracted, error) {
	var doc any
	return e.ExtractPayload(payload, &doc)
}

// ExtractPayload is Extract that also stores the decoded payload in *doc,
// for a caller that goes on to use it: maps, slices, float64, string, bool,
// as encoding/json decodes into an any. The key and fingerprint are found
// in the payload's own text, its numbers as they are written.
func (e *Expr) ExtractPayload(payload []byte, doc *any) (Extracted, error) {
	return e.ExtractInput(Input{Payload: payload}, doc)
}

// ExtractInput is ExtractPayload for a message that may have come in an
// envelope: expressions search in.Payload, those that start with BodyRoot
// in.Body. *doc is the decoded payload.
func (e *Expr) ExtractInput(in Input, doc *any) (Extracted, error) {
	v, err := decodeJSON(in.Payload)
	if err != nil {
		return Extracted{}, fmt.Errorf("%w: %w", ErrPayload, err)
	}
	p := newDocument(v)
	*doc = p.floats
	body := func() (*document, error) { return p, nil }
	if len(in.Body) > 0 {
		body = func() (*document, error) {
			v, err := decodeJSON(in.Body)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", BodyRoot, err)
			}
			return newDocument(v), nil
		}
	}
	return e.extract(p, body)
}

// ExtractValue is Extract on a payload already decoded by encoding/json
// into an any (maps, slices, string, bool, nil, and numbers). Decode it with
// UseNumber, so that numbers are json.Number and keyed by their literal
// text; a float64 counts as its shortest text ("1", "9007199254740992").
// BodyRoot searches the payload too.
func (e *Expr) ExtractValue(doc any) (Extracted, error) {
	p := newDocument(doc)
	return e.extract(p, func() (*document, error) { return p, nil })
}

// extract finds the key and fingerprint in payload, or in the body of an
// expression that starts with BodyRoot (decoded at most once).
func (e *Expr) extract(payload *document, body func() (*document, error)) (Extracted, error) {
	var b *document
	search := func(c *compiled) (any, error) {
		if !c.onBody {
			return c.value(payload)
		}
		if b == nil {
			var err error
			if b, err = body(); err != nil {
				return nil, err
			}
		}
		return c.value(b)
	}
	v, err := search(e.keyExpr)
	if err != nil {
		return Extracted{}, fmt.Errorf("%w: key expression %q: %w", ErrPayload, e.key, err)
	}
	key, ok := keyText(v)
	if !ok {
		found, _ := canonical(v)
		return Extracted{}, &MissingKeyError{Expr: e.key, Found: string(found)}
	}
	x := Extracted{Key: key}
	if e.fpExpr != nil {
		fv, err := search(e.fpExpr)
		if err == nil {
			x.Fingerprint, err = Fingerprint(fv)
		}
		if err != nil {
			return Extracted{}, fmt.Errorf("%w: fingerprint expression %q: %w", ErrPayload, e.fingerprint, err)
		}
	}
	return x, nil
}

// Fingerprint hashes v's canonical JSON (compact, object keys sorted):
// "sha256:" and 32 hex digits.
func Fingerprint(v any) (string, error) {
	b, err := canonical(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:16]), nil
}

// keyText turns an expression's value, its numbers json.Number (see
// value), into a key; false if it is missing.
func keyText(v any) (string, bool) {
	switch t := v.(type) {
	case nil:
		return "", false
	case string:
		return t, t != ""
	case json.Number:
		return string(t), true
	case bool:
		return strconv.FormatBool(t), true
	case []any:
		if len(t) == 0 {
			return "", false
		}
		for _, x := range t {
			if x == nil {
				return "", false
			}
		}
	case map[string]any:
		if len(t) == 0 {
			return "", false
		}
	}
	b, err := canonical(v)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// canonical is v's compact JSON; encoding/json sorts map keys and writes a
// json.Number as its text.
func canonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// decodeJSON decodes one JSON document, its numbers json.Number.
func decodeJSON(b []byte) (any, error) {
	if !json.Valid(b) {
		var v any
		return nil, json.Unmarshal(b, &v) // for encoding/json's own message
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// compiled is an expression split at its first powertools_json call:
// "PREFIX.powertools_json(INNER).REST". PREFIX is searched on the document,
// INNER on PREFIX's value, the string it finds is decoded as JSON, and REST
// is searched on that. An expression without the call is plain.
type compiled struct {
	plain  *jmespath.JMESPath // no powertools_json: the whole expression
	prefix *jmespath.JMESPath // nil: the document itself
	inner  *compiled
	rest   *compiled // nil: the decoded value itself

	// Set on a whole expression (compileRoot):
	onBody        bool // it starts with BodyRoot: it searches the body as delivered
	writesNumbers bool // it calls to_string
}

// compileRoot compiles a whole expression: one that starts with BodyRoot
// searches the body as delivered with what follows the root.
func compileRoot(expr string) (*compiled, error) {
	expr = strings.TrimSpace(expr)
	onBody := false
	if rest, ok := strings.CutPrefix(expr, BodyRoot); ok && (rest == "" || !isIdent(rest[0])) {
		onBody = true
		rest = strings.TrimSpace(rest)
		switch {
		case rest == "":
			rest = "@"
		case strings.HasPrefix(rest, "."):
			rest = rest[1:]
		case strings.HasPrefix(rest, "|"):
			rest = strings.TrimSpace(rest[1:])
		case strings.HasPrefix(rest, "["):
			rest = "@" + rest
		default:
			return nil, fmt.Errorf("unexpected %q after %s", rest, BodyRoot)
		}
		expr = rest
	}
	if findUnquoted(expr, 0, func(i int) bool { return expr[i] == '$' }) >= 0 {
		return nil, fmt.Errorf("%s may only start the expression; no other $ name is known", BodyRoot)
	}
	c, err := compile(expr)
	if err != nil {
		return nil, err
	}
	c.onBody, c.writesNumbers = onBody, writesNumber(expr)
	return c, nil
}

func compile(expr string) (*compiled, error) {
	expr = strings.TrimSpace(expr)
	i := indexCall(expr)
	if i < 0 {
		jp, err := jmespath.Compile(expr)
		if err != nil {
			return nil, err
		}
		return &compiled{plain: jp}, nil
	}
	open := i + len(JSONFunction)
	closing := matchParen(expr, open)
	if closing < 0 {
		return nil, fmt.Errorf("%s( at offset %d is not closed", JSONFunction, i)
	}
	c := &compiled{}
	prefix := strings.TrimSpace(expr[:i])
	if prefix != "" {
		if !strings.HasSuffix(prefix, ".") {
			return nil, fmt.Errorf("%s must start the expression or follow a '.'", JSONFunction)
		}
		jp, err := jmespath.Compile(strings.TrimSuffix(prefix, "."))
		if err != nil {
			return nil, err
		}
		c.prefix = jp
	}
	inner, err := compile(expr[open+1 : closing])
	if err != nil {
		return nil, err
	}
	c.inner = inner
	rest := strings.TrimSpace(expr[closing+1:])
	switch {
	case rest == "":
	case strings.HasPrefix(rest, "."):
		rest = rest[1:]
	case strings.HasPrefix(rest, "|"):
		rest = strings.TrimSpace(rest[1:])
	case strings.HasPrefix(rest, "["):
		rest = "@" + rest
	default:
		return nil, fmt.Errorf("unexpected %q after %s(...)", rest, JSONFunction)
	}
	if rest != "" {
		if c.rest, err = compile(rest); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// search finds c's value in doc. A document powertools_json decodes keeps
// its numbers as json.Number if r is nil, else they become float64 and r
// notes their texts.
func (c *compiled) search(doc any, r *reading) (any, error) {
	if c.plain != nil {
		return c.plain.Search(doc)
	}
	v := doc
	if c.prefix != nil {
		var err error
		if v, err = c.prefix.Search(doc); err != nil {
			return nil, err
		}
	}
	s, err := c.inner.search(v, r)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, nil // nothing there: missing, like any absent field
	}
	str, ok := s.(string)
	if !ok {
		return nil, fmt.Errorf("%s: argument is %s, not a string", JSONFunction, jsonType(s))
	}
	decoded, err := decodeJSON([]byte(str))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", JSONFunction, err)
	}
	if r != nil {
		decoded = r.floats(decoded)
	}
	if c.rest == nil {
		return decoded, nil
	}
	return c.rest.search(decoded, r)
}

func jsonType(v any) string {
	switch v.(type) {
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// indexCall finds the first powertools_json( outside quotes, or -1.
func indexCall(expr string) int {
	return findUnquoted(expr, 0, func(i int) bool {
		return strings.HasPrefix(expr[i:], JSONFunction+"(") && (i == 0 || !isIdent(expr[i-1]))
	})
}

// matchParen returns the index of the ')' closing the '(' at open, or -1.
func matchParen(expr string, open int) int {
	depth := 0
	return findUnquoted(expr, open, func(i int) bool {
		switch expr[i] {
		case '(':
			depth++
		case ')':
			depth--
			return depth == 0
		}
		return false
	})
}

// findUnquoted returns the first index from on, outside quoted strings
// (JMESPath's "identifiers", 'raw strings' and `literals`, with backslash
// escapes), at which found is true, or -1.
func findUnquoted(expr string, from int, found func(i int) bool) int {
	var quote byte
	for i := from; i < len(expr); i++ {
		ch := expr[i]
		switch {
		case quote != 0:
			switch ch {
			case '\\':
				i++
			case quote:
				quote = 0
			}
		case ch == '"' || ch == '\'' || ch == '`':
			quote = ch
		case found(i):
			return i
		}
	}
	return -1
}

func isIdent(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
