package riverjob

// Noted is how many completed rows d's pilot holds for River's completer.
func (d *Driver) Noted() int {
	d.pilot.mu.Lock()
	defer d.pilot.mu.Unlock()
	return len(d.pilot.noted)
}

// Working is how many rows of jobs being worked d's pilot holds.
func (d *Driver) Working() int {
	d.pilot.mu.Lock()
	defer d.pilot.mu.Unlock()
	return len(d.pilot.working)
}
