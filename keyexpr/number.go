package keyexpr

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// The JMESPath library computes with float64: comparisons, sort_by, max,
// sum read numbers as float64 and no other type. A key, though, must tell
// apart every two JSON values, and float64 does not: 9007199254740993 is
// 9007199254740992 to it, and 1.0 is 1. So an expression is searched on the
// payload with float64 numbers, for JMESPath's meaning, and the numbers in
// its value are then written with the text the payload gave them. Where
// that text is not certain (several texts of one value were read, or
// to_string wrote a number that float64 does not hold exactly), the
// expression is searched again on the payload with its numbers as
// json.Number, and the value is a key only if both searches agree.

// reading is what turning a document's json.Numbers into float64 found.
type reading struct {
	texts   map[float64][]string // the texts read of each value
	inexact bool                 // some text is not its value's shortest text
}

// floats is v with every json.Number a float64 (±Inf when out of range),
// noting each number's text in r.
func (r *reading) floats(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		if err != nil && !math.IsInf(f, 0) {
			f = math.NaN() // not a number at all: never equal to another
		}
		if shortest(f) != string(t) {
			r.inexact = true
		}
		if r.texts == nil {
			r.texts = map[float64][]string{}
		}
		if !contains(r.texts[f], string(t)) {
			r.texts[f] = append(r.texts[f], string(t))
		}
		return f
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = r.floats(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = r.floats(x)
		}
		return out
	}
	return v
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// shortest is f as encoding/json writes a float64; "" if it is not finite.
func shortest(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return ""
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// errAmbiguous: a value read from several texts ("1" and "1.0").
var errAmbiguous = errors.New("ambiguous")

// document is a decoded JSON document as written (numbers json.Number),
// its float64 twin, and what reading the twin (and the documents
// powertools_json decodes in it) found.
type document struct {
	written, floats any
	r               *reading
}

func newDocument(v any) *document {
	d := &document{written: v, r: &reading{}}
	d.floats = d.r.floats(v)
	return d
}

// value is c's value on d. Numbers in the value are json.Number: the
// document's text for a number it has, the shortest text for one the
// expression computed.
func (c *compiled) value(d *document) (any, error) {
	doc, docF, r := d.written, d.floats, d.r
	vF, err := c.search(docF, r)
	if err != nil {
		return nil, err
	}
	v, err := r.texted(vF)
	ambiguous := errors.Is(err, errAmbiguous)
	if err != nil && !ambiguous {
		return nil, err
	}
	if !ambiguous && (!c.writesNumbers || !r.inexact) {
		return v, nil
	}
	// The float64 search alone cannot say: search the payload as written.
	vN, errN := c.search(doc, nil)
	if errN != nil {
		return nil, fmt.Errorf("%w: its value depends on reading the payload's numbers as float64 (%w)", ErrNumber, errN)
	}
	var rN reading
	if !reflect.DeepEqual(rN.floats(vN), vF) {
		return nil, fmt.Errorf("%w: its value depends on reading the payload's numbers as float64", ErrNumber)
	}
	w, err := written(vN)
	if err != nil {
		return nil, err
	}
	if !ambiguous && !reflect.DeepEqual(v, w) {
		return nil, fmt.Errorf("%w: its value depends on reading the payload's numbers as float64", ErrNumber)
	}
	return w, nil
}

// texted is v with each float64 the json.Number of its text in the
// payload, or its shortest text if the payload has none (the expression
// computed it). errAmbiguous: the payload wrote one value several ways.
func (r *reading) texted(v any) (any, error) {
	switch t := v.(type) {
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("%w: %s is out of float64's range", ErrNumber, cmpOr(r.texts[t], fmt.Sprint(t)))
		}
		switch texts := r.texts[t]; len(texts) {
		case 0:
			return json.Number(shortest(t)), nil
		case 1:
			return json.Number(texts[0]), nil
		default:
			return nil, errAmbiguous
		}
	case json.Number:
		return checked(t)
	case []any:
		out := make([]any, len(t))
		var amb error
		for i, x := range t {
			y, err := r.texted(x)
			if errors.Is(err, errAmbiguous) {
				amb = err
				continue
			}
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, amb
	case map[string]any:
		out := make(map[string]any, len(t))
		var amb error
		for k, x := range t {
			y, err := r.texted(x)
			if errors.Is(err, errAmbiguous) {
				amb = err
				continue
			}
			if err != nil {
				return nil, err
			}
			out[k] = y
		}
		return out, amb
	}
	return v, nil
}

// written is v, searched on the payload as written, with each float64 (the
// expression computed it) the json.Number of its shortest text.
func written(v any) (any, error) {
	var r reading
	return r.texted(v)
}

// checked returns n if it is a finite float64.
func checked(n json.Number) (any, error) {
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("%w: %s is out of float64's range", ErrNumber, n)
	}
	return n, nil
}

func cmpOr(texts []string, s string) string {
	if len(texts) > 0 {
		return strings.Join(texts, ", ")
	}
	return s
}

// writesNumber reports whether expr calls to_string, which writes a number
// as float64 holds it.
func writesNumber(expr string) bool {
	return findUnquoted(expr, 0, func(i int) bool {
		return strings.HasPrefix(expr[i:], "to_string") && (i == 0 || !isIdent(expr[i-1]))
	}) >= 0
}
