package bench

import (
	"os"
	"testing"
)

// TestParseRecordedH200Library reads the harness's output of a real H200 run (torch 2.11,
// two attention folders in the three modes): SDPA's backends timed or refused per case (cuDNN
// "No available kernel", flash refusing an explicit mask), FlexAttention refused under
// dropout, library ops' backward mode with dropout timed as a plain call, torch.compile's
// backward timed (compiled without donated buffers) and the SDPA rewrite recorded as absent.
func TestParseRecordedH200Library(t *testing.T) {
	out, err := os.ReadFile("testdata/harness-h200-attention.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cases) != 6 {
		t.Fatalf("%d cases, want 2 folders x 3 modes", len(res.Cases))
	}
	drop, causal := res.Cases[:3], res.Cases[3:]
	for _, c := range res.Cases {
		if !c.Correct || c.CompileSDPA == nil || *c.CompileSDPA || c.CompileUs <= 0 {
			t.Errorf("%s %s: correct %v, compile_sdpa %v, compile %v", c.Name, c.Mode, c.Correct, c.CompileSDPA, c.CompileUs)
		}
	}
	if c := drop[0]; c.SdpaBackend != "flash" || c.Library["sdpa_flash"].Us != c.SdpaUs || c.Library["flex"].Refused != "FlexAttention has no dropout" {
		t.Errorf("dropout forward: %s %v %+v", c.SdpaBackend, c.SdpaUs, c.Library)
	}
	for _, op := range []string{"sdpa_flash", "sdpa_efficient", "sdpa_cudnn"} {
		if drop[1].Library[op].Timing != "call" || drop[2].Library[op].Timing != "cudagraph" {
			t.Errorf("%s: backward timed %q, full %q", op, drop[1].Library[op].Timing, drop[2].Library[op].Timing)
		}
	}
	if drop[1].Timing["compile"] != "cudagraph" {
		t.Errorf("the compiled backward was not captured: %v", drop[1].Timing)
	}
	if c := causal[0]; c.Library["sdpa_cudnn"].Refused != "No available kernel. Aborting execution." || c.FlexUs <= 0 || c.SdpaBackend != "efficient" {
		t.Errorf("causal forward: %+v", c.Library)
	}
	if causal[0].Launches != 1 || causal[0].EagerLaunches != 14 {
		t.Errorf("launches %d/%d", causal[0].Launches, causal[0].EagerLaunches)
	}
}
