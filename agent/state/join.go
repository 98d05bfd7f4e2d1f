package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/atomicfile"
)

// JoinFile holds the mesh's join string (id, secret, seeds) in the state dir.
const JoinFile = "mesh.json"

// LoadJoin reads the join string saved in the state dir; ok is false when there is none.
// A join file others can read is refused: the secret in it opens the whole mesh.
func (d *Dir) LoadJoin() (j api.Join, ok bool, err error) {
	return LoadJoinFile(filepath.Join(d.path, JoinFile))
}

// LoadJoinFile reads a join file: the JSON document SaveJoin writes, or a bare join string.
func LoadJoinFile(name string) (j api.Join, ok bool, err error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return api.Join{}, false, nil
	}
	if err != nil {
		return api.Join{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return api.Join{}, false, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return api.Join{}, false, fmt.Errorf("%s holds the mesh secret but is readable by others (mode %v): run `chmod 600 %s`", name, fi.Mode().Perm(), name)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return api.Join{}, false, err
	}
	j, err = api.ParseJoin(api.JoinFileText(b))
	if err != nil {
		return api.Join{}, false, fmt.Errorf("%s: %w", name, err)
	}
	return j, true, nil
}

// SaveJoin stores the join string 0600, atomically.
func (d *Dir) SaveJoin(j api.Join) error {
	b, err := json.MarshalIndent(api.JoinDoc{Join: j.String()}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(d.path, JoinFile), append(b, '\n'), 0o600)
}
