package report

import (
	"encoding/json"
	"fmt"
)

// Files written by Write, in the report directory.
const (
	FileHTML     = "index.html"
	FileMarkdown = "summary.md"
	FileJUnit    = "junit.xml"
	FileJSON     = "report.json"
)

// JSON renders report.json (see SCHEMA.md).
func (r *Report) JSON() ([]byte, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding report.json: %w", err)
	}
	return append(data, '\n'), nil
}
