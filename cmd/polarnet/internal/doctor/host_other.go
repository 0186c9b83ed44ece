//go:build !linux

package doctor

import (
	"errors"
	"os"
)

type devStat struct {
	char         bool
	major, minor uint32
}

func statDev(path string, st *devStat) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	return errors.New("polarnet's links need Linux")
}

// HostEnv is the Env of this host: polarnet's links need Linux, so only
// the file checks run, and they fail.
func HostEnv(bool) *Env { return &Env{Euid: os.Geteuid(), Getenv: os.Getenv} }
