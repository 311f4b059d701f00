ALTER TABLE tributary_event_lane_event RESET (fillfactor);
