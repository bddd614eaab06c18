// Package safefile writes output files and folders so that a failure never leaves a
// partial result behind: content goes to a temporary name beside the target and is renamed
// into place only when it is complete.
package safefile
