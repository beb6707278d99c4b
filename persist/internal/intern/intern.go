// Package intern keeps one copy of each string read from a log: a replay
// meets the same tube names over and over.
package intern

// Strings maps each string to its one kept copy.
type Strings map[string]string

// Of returns the kept copy of b, keeping one first if there is none.
func (m Strings) Of(b []byte) string {
	if s, ok := m[string(b)]; ok {
		return s
	}
	s := string(b)
	m[s] = s
	return s
}
