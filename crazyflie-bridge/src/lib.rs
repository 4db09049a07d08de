//! Crazyflie 2.1 bridge (see the crate description).
