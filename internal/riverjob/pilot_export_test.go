package riverjob

// Noted is how many completed rows d's pilot holds for River's completer.
func (d *Driver) Noted() int {
	d.pilot.mu.Lock()
	defer d.pilot.mu.Unlock()
	return len(d.pilot.noted)
}
