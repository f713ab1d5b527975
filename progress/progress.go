// Package progress draws byte-count progress bars for long loads (weights
// uploaded to a GPU, checkpoints written or read) on a terminal or log.
package progress

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar returns a progress callback that draws a bar titled desc on w. The
// bar appears on the first call whose total is at least minBytes: small
// jobs finish at once and print nothing. A nil w draws nothing.
func Bar(w io.Writer, desc string, minBytes int64) func(done, total int64) {
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			if w == nil || total < minBytes {
				return
			}
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
				progressbar.OptionSetDescription(desc), progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
		}
		bar.Set64(done)
	}
}
