package demo

import (
	"fmt"
	"strconv"
	"strings"
)

// effects says how far a row's side effects were from exactly one per unit
// (a payment charged, an order shipped, a ledger entry written), so that a
// table shows at a glance which row is wrong and in which direction.
type effects struct {
	// Double counts effects beyond a unit's first: a payment charged twice
	// counts 1, three times 2.
	Double int
	// Lost counts units with no effect at all.
	Lost int
}

// countEffects returns the Effects of units whose effects are counted by n.
func countEffects[N int | int64](units []string, n map[string]N) effects {
	var e effects
	for _, u := range units {
		switch c := int(n[u]); {
		case c == 0:
			e.Lost++
		case c > 1:
			e.Double += c - 1
		}
	}
	return e
}

// OK reports whether every unit had exactly one effect.
func (e effects) OK() bool { return e.Double == 0 && e.Lost == 0 }

// String is the mark a table row ends with: "ok", "double N", "lost N", or
// both.
func (e effects) String() string {
	var parts []string
	if e.Double > 0 {
		parts = append(parts, fmt.Sprintf("double %d", e.Double))
	}
	if e.Lost > 0 {
		parts = append(parts, fmt.Sprintf("lost %d", e.Lost))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, ", ")
}

// pair is one "name number" cell of a table row.
type pair struct {
	name  string
	value int
}

// tableRow is a label, its measured pairs, and the mark that says whether
// its effects were exactly once.
type tableRow struct {
	label string
	pairs []pair
	mark  effects
}

// formatTable lays rows out as the README shows them: the label,
// padded so that the pairs line up, two or more spaces, then the pairs three
// spaces apart, then the row's mark. Every row of one table has the same pair
// names.
func formatTable(rows []tableRow) string {
	labelWidth := 0
	var cellWidth []int
	cells := func(r tableRow) []string {
		cs := make([]string, 0, len(r.pairs)+1)
		for _, p := range r.pairs {
			cs = append(cs, p.name+" "+strconv.Itoa(p.value))
		}
		return append(cs, r.mark.String())
	}
	for _, r := range rows {
		labelWidth = max(labelWidth, len(r.label))
		for i, c := range cells(r) {
			if i == len(cellWidth) {
				cellWidth = append(cellWidth, 0)
			}
			cellWidth[i] = max(cellWidth[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		line.WriteString(r.label)
		line.WriteString(strings.Repeat(" ", labelWidth-len(r.label)+2))
		for i, c := range cells(r) {
			if i > 0 {
				line.WriteString("   ")
			}
			line.WriteString(c)
			line.WriteString(strings.Repeat(" ", cellWidth[i]-len(c)))
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
