package dpdk

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Where the kernel reports hugepages and mounts; tests point them elsewhere.
var (
	hugepagesDir = "/sys/kernel/mm/hugepages"
	mountsFile   = "/proc/mounts"
)

// hugepageHint says how to reserve hugepages.
const hugepageHint = "reserve some (echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, " +
	"and mount -t hugetlbfs nodev /dev/hugepages for runtime files) or set EALConfig.NoHuge"

// checkHugepages tells, before EAL is started (a failed rte_eal_init cannot
// be retried in the same process), whether c can get the memory it asks
// for: free hugepages unless NoHuge, and a hugetlbfs mount where EAL keeps
// runtime files in one.
func checkHugepages(c *EALConfig) error {
	if c.NoHuge {
		return nil
	}
	free, err := freeHugepageBytes()
	if err != nil {
		return fmt.Errorf("%w: cannot read %s (%v); %s", ErrNoHugepages, hugepagesDir, err, hugepageHint)
	}
	if free == 0 {
		return fmt.Errorf("%w: none of the hugepages under %s is free; %s", ErrNoHugepages, hugepagesDir, hugepageHint)
	}
	if c.MemoryMB > 0 && free < int64(c.MemoryMB)<<20 {
		return fmt.Errorf("%w: EALConfig.MemoryMB is %d MiB but only %d MiB of hugepages are free; %s",
			ErrNoHugepages, c.MemoryMB, free>>20, hugepageHint)
	}
	mounts, err := hugetlbfsMounts()
	if err != nil {
		return fmt.Errorf("dpdk: reading %s: %w", mountsFile, err)
	}
	switch {
	case c.HugeDir != "":
		dir := filepath.Clean(c.HugeDir)
		for _, m := range mounts {
			if m == dir {
				return nil
			}
		}
		return fmt.Errorf("%w: EALConfig.HugeDir %s is not a hugetlbfs mount (mount -t hugetlbfs nodev %s)", ErrNoHugepages, c.HugeDir, c.HugeDir)
	case c.FilePrefix != "" && len(mounts) == 0:
		// In memory, EAL takes hugepages from memfd; with runtime files it
		// needs a mount.
		return fmt.Errorf("%w: EALConfig.FilePrefix needs a hugetlbfs mount and there is none (mount -t hugetlbfs nodev /dev/hugepages)", ErrNoHugepages)
	}
	return nil
}

// FreeHugepageBytes returns the free hugepage memory of all page sizes, in
// bytes: what EAL could take from hugepages now. Programs use it to choose
// EALConfig.NoHuge before InitEAL.
func FreeHugepageBytes() (int64, error) { return freeHugepageBytes() }

// freeHugepageBytes returns the free hugepage memory of every page size.
func freeHugepageBytes() (int64, error) {
	entries, err := os.ReadDir(hugepagesDir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		// hugepages-2048kB, hugepages-1048576kB
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(size, "kB"), 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(hugepagesDir, e.Name(), "free_hugepages"))
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/free_hugepages: %w", e.Name(), err)
		}
		total += n * kb << 10
	}
	return total, nil
}

// hugetlbfsMounts returns the mount points of hugetlbfs file systems.
func hugetlbfsMounts() ([]string, error) {
	f, err := os.Open(mountsFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 3 && fields[2] == "hugetlbfs" {
			dirs = append(dirs, unescapeMount(fields[1]))
		}
	}
	return dirs, s.Err()
}

// unescapeMount undoes the octal escapes of /proc/mounts (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
