package demo

import (
	"strconv"
	"strings"
)

// pair is one "name number" cell of a table row.
type pair struct {
	name  string
	value int
}

// tableRow is a label and its measured pairs.
type tableRow struct {
	label string
	pairs []pair
}

// formatTable lays rows out as the design document shows them: the label,
// padded so that the pairs line up, two or more spaces, then the pairs three
// spaces apart. Every row of one table has the same pair names.
func formatTable(rows []tableRow) string {
	labelWidth := 0
	var cellWidth []int
	for _, r := range rows {
		labelWidth = max(labelWidth, len(r.label))
		for i, p := range r.pairs {
			if i == len(cellWidth) {
				cellWidth = append(cellWidth, 0)
			}
			cellWidth[i] = max(cellWidth[i], len(p.name)+1+len(strconv.Itoa(p.value)))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		line.WriteString(r.label)
		line.WriteString(strings.Repeat(" ", labelWidth-len(r.label)+2))
		for i, p := range r.pairs {
			if i > 0 {
				line.WriteString("   ")
			}
			cell := p.name + " " + strconv.Itoa(p.value)
			line.WriteString(cell)
			line.WriteString(strings.Repeat(" ", cellWidth[i]-len(cell)))
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
