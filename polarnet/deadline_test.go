package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A deadline removed while its timer has fired but not yet expired it
// does not expire: the timer waits for the lock the removal holds.
func TestDeadlineRemovedAsItFires(t *testing.T) {
	d := newDeadline(nil)
	d.set(time.Now().Add(time.Millisecond))
	d.mu.Lock()
	time.Sleep(20 * time.Millisecond) // the timer fires and waits for mu
	d.setLocked(time.Time{})
	d.mu.Unlock()
	assert.Never(t, func() bool { return isClosed(d.done()) }, 50*time.Millisecond, time.Millisecond)
}
