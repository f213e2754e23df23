package option

import "strings"

// Table writes the options as the Markdown table docs/brokers.md shows
// for the driver, one row per option (options declared with JoinRow share
// the row before). A test holds the documentation to it, so an option
// cannot be added, renamed or removed without its line in the docs.
func (s *Set) Table() string {
	var b strings.Builder
	b.WriteString("| Option | Default | Meaning |\n|---|---|---|\n")
	for i := 0; i < len(s.specs); {
		sp := s.specs[i]
		names := []string{"`" + sp.name + "`"}
		for i++; i < len(s.specs) && s.specs[i].joined; i++ {
			names = append(names, "`"+s.specs[i].name+"`")
		}
		b.WriteString("| " + strings.Join(names, ", ") + " | " + sp.def + " | " + sp.doc + " |\n")
	}
	return b.String()
}
