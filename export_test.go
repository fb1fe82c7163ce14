package sortie

// FetchStopped returns a channel closed once Stop has stopped c's fetching.
// c must be started. For tests of package sortie_test only.
func FetchStopped(c *Client) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run.stopFetch
}
