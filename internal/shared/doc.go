// Package shared locates the project's shared data (real traces and reference notes), which
// lives beside the repository checkout in ../shared and is never copied into it.
//
// Tests use it to read the real traces; FUSEADVISE_SHARED overrides the location.
package shared
