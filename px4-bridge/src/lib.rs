//! MAVLink 2 offboard bridge to PX4 (see the crate description).
