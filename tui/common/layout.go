package common

import "github.com/charmbracelet/lipgloss"

// RowsOf is the rows parts take on the screen as drawn. Views size their content by it, never
// by counting their chrome (status lines, column titles, rules, an input) as one line each: a
// border or padding given to one of its styles then shrinks the content and moves what is
// under the chrome down with it, instead of overflowing the screen.
func RowsOf(parts ...string) int {
	n := 0
	for _, p := range parts {
		n += lipgloss.Height(p)
	}
	return n
}
