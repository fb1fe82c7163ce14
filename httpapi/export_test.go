package httpapi

// Routes returns the API's method patterns, each with the scope a token
// needs for it ("" for none), for the test that holds openapi.json to the
// mux.
func Routes() map[string]string {
	out := map[string]string{}
	for _, rt := range (&api{}).routes() {
		out[rt.pattern] = string(rt.scope)
	}
	return out
}
