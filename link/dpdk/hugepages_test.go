package dpdk

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// fakeHost points the hugepage and mount checks at files of the test's.
func fakeHost(t *testing.T, free map[string]string, mounts string) {
	t.Helper()
	dir := t.TempDir()
	for size, n := range free {
		d := filepath.Join(dir, "hugepages", "hugepages-"+size)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "free_hugepages"), []byte(n+"\n"), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "hugepages"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mounts"), []byte(mounts), 0o644))
	oldDir, oldMounts := hugepagesDir, mountsFile
	hugepagesDir, mountsFile = filepath.Join(dir, "hugepages"), filepath.Join(dir, "mounts")
	t.Cleanup(func() { hugepagesDir, mountsFile = oldDir, oldMounts })
}

const procMounts = "proc /proc proc rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\nnodev /mnt/huge\\0401G hugetlbfs rw 0 0\n"

func TestCheckHugepages(t *testing.T) {
	fakeHost(t, map[string]string{"2048kB": "512", "1048576kB": "0"}, procMounts)
	assert.NoError(t, checkHugepages(&EALConfig{}))
	assert.NoError(t, checkHugepages(&EALConfig{FilePrefix: "pn"}))
	assert.NoError(t, checkHugepages(&EALConfig{HugeDir: "/dev/hugepages/"}))
	assert.NoError(t, checkHugepages(&EALConfig{HugeDir: "/mnt/huge 1G"}), "octal escapes of /proc/mounts")
	assert.NoError(t, checkHugepages(&EALConfig{MemoryMB: 1024}))
	err := checkHugepages(&EALConfig{MemoryMB: 2048})
	assert.ErrorIs(t, err, ErrNoHugepages)
	assert.ErrorContains(t, err, "only 1024 MiB")
	err = checkHugepages(&EALConfig{HugeDir: "/tmp"})
	assert.ErrorContains(t, err, "/tmp is not a hugetlbfs mount")

	fakeHost(t, map[string]string{"2048kB": "0"}, procMounts)
	err = checkHugepages(&EALConfig{})
	assert.ErrorIs(t, err, ErrNoHugepages)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	assert.ErrorContains(t, err, "nr_hugepages")
	assert.NoError(t, checkHugepages(&EALConfig{NoHuge: true}))

	fakeHost(t, map[string]string{"2048kB": "64"}, "proc /proc proc rw 0 0\n")
	assert.NoError(t, checkHugepages(&EALConfig{}), "in memory EAL takes hugepages from memfd")
	assert.ErrorContains(t, checkHugepages(&EALConfig{FilePrefix: "pn"}), "needs a hugetlbfs mount")
}
