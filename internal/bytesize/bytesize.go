// Package bytesize writes byte counts for people: 512 B, 8.0 KiB, 1.5 GiB.
package bytesize

import "fmt"

// Format writes n bytes in binary units, one decimal past the first unit.
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
