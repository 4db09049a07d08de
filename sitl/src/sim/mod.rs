//! The simulated world: vehicles, the links they run over, and the providers' updates.

pub mod crazyflie;
pub mod dynamics;
pub mod pair;
pub mod px4;
pub mod udp;
pub mod wire;
pub mod world;
