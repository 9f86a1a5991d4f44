// Package dockerproto is what internal/pgserver and cmd/twice-pgdocker say
// to each other over the helper's stdin and stdout: one JSON Request a
// line, answered by one JSON Response a line (a start is preceded by one
// Response with only Created set, as soon as the container exists).
package dockerproto

// Ops a Request may ask for.
const (
	OpStart = "start" // create and start the container; the first request
	OpState = "state" // is it running, and its exit code if not
	OpLogs  = "logs"  // the end of its log
	OpExec  = "exec"  // run Cmd in it with Env, its stdout into the file Stdout
	OpStop  = "stop"  // remove it; the helper exits after answering
)

// Request is one line the harness sends.
type Request struct {
	Op string `json:"op"`

	// start
	Image    string            `json:"image,omitempty"`
	Password string            `json:"password,omitempty"`
	Args     []string          `json:"args,omitempty"`   // the server's command line
	Labels   map[string]string `json:"labels,omitempty"` // the owner label among them

	// exec
	Cmd    []string `json:"cmd,omitempty"`
	Env    []string `json:"env,omitempty"`    // never on the command line: it holds the password
	Stdout string   `json:"stdout,omitempty"` // file to write the command's stdout to (0600)
}

// Response is one line the helper answers.
type Response struct {
	// Error says what failed; Unavailable marks the errors meaning "no
	// Docker here" (no engine answered), after which the harness may try
	// another way to a server.
	Error       string `json:"error,omitempty"`
	Unavailable bool   `json:"unavailable,omitempty"`

	Created string `json:"created,omitempty"` // start, early: the container exists

	// start
	ID   string `json:"id,omitempty"`
	Host string `json:"host,omitempty"`
	Port string `json:"port,omitempty"`

	// state
	Running  bool `json:"running,omitempty"`
	ExitCode int  `json:"exit_code,omitempty"`

	// logs
	Logs string `json:"logs,omitempty"`

	// exec: the command's exit code and stderr; ReadError when its output
	// could not be read (the command's own failure is Code and Stderr).
	Code      int    `json:"code,omitempty"`
	Stderr    string `json:"stderr,omitempty"`
	ReadError string `json:"read_error,omitempty"`

	Stopped bool `json:"stopped,omitempty"`
}
