package main

import (
	"bytes"
	_ "embed"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

//go:embed performance.md.tmpl
var docTemplate string

// docPage is what performance.md.tmpl is filled with.
type docPage struct {
	Command string // how the run was started, with the machine's own paths left out
	Table   string // results.txt: the header, the table and the targets
	Chart   string // chart.png, relative to the page
	// CapacityCPU, when above 0, is the cores each node of the capacity
	// rows ran confined to.
	CapacityCPU float64
}

// writeDoc writes the run's page at path: the table and targets of this
// run, the command that made it, the chart in outDir, and the CPU quota of
// each node of the capacity rows (0: they were not confined).
func writeDoc(path, outDir, table string, args []string, capacityCPU float64) error {
	page, err := renderDoc(path, outDir, table, args, capacityCPU)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, page)
}

func renderDoc(path, outDir, table string, args []string, capacityCPU float64) ([]byte, error) {
	absDoc, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	absOut, err := filepath.Abs(outDir)
	if err != nil {
		return nil, err
	}
	chart, err := filepath.Rel(absDoc, filepath.Join(absOut, "chart.png"))
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("performance.md").Parse(docTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, docPage{Command: command(args), Table: strings.TrimRight(table, "\n"), Chart: filepath.ToSlash(chart), CapacityCPU: capacityCPU})
	return b.Bytes(), err
}

// command is `make bench` with the flags of this run that say what was
// run, leaving out the paths that only name files on this machine.
func command(args []string) string {
	var kept []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch name {
		case "beanpole", "beanstalkd", "out", "doc":
			if !hasValue {
				i++ // its value is the next argument
			}
			continue
		}
		kept = append(kept, args[i])
	}
	if len(kept) == 0 {
		return "make bench"
	}
	return `make bench BENCHARGS="` + strings.Join(kept, " ") + `"`
}

// repoModule is the module path of the repository's root go.mod.
const repoModule = "github.com/beanpole/beanpole"

// repoPath is path as the report gives it: relative to the repository
// (bin/beanpole) when it lies in the one that holds dir, so that the page
// does not record the machine's own directories; otherwise unchanged (a
// system binary such as /usr/bin/beanstalkd).
func repoPath(path, dir string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	root := repoRoot(dir)
	if root == "" {
		return path
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return filepath.ToSlash(rel)
}

// repoRoot is the nearest directory at or above dir whose go.mod declares
// repoModule, or "" if there is none.
func repoRoot(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
					if strings.Trim(f[1], `"`) == repoModule {
						return d
					}
					break
				}
			}
		}
		up := filepath.Dir(d)
		if up == d {
			return ""
		}
		d = up
	}
}
