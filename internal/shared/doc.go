// Package shared locates the project's shared data (real traces and reference notes), which
// lives beside the repository checkout in ../shared and is never copied into it.
//
// Tests read the real traces through Require, which skips a test when the shared data is
// absent, or fails it when FUSEADVISE_REQUIRE_SHARED=1 (CI sets it, so that a missing
// ../shared cannot turn the golden tests into silent skips). FUSEADVISE_SHARED overrides the
// location.
package shared
