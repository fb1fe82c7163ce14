package bench

import "testing"

func TestThousands(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 1234567: "1,234,567", 1234567.8: "1,234,568", 100000: "100,000"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%g) = %q, want %q", in, got, want)
		}
	}
}
