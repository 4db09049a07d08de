//! PX4 flight modes as carried in `HEARTBEAT.custom_mode` and commanded with
//! `MAV_CMD_DO_SET_MODE`.
//!
//! PX4 packs its mode into the 32-bit custom mode as `sub_mode << 24 | main_mode << 16`
//! (`px4_custom_mode.h`). OFFBOARD is main mode 6; HOLD is AUTO (4) with sub mode LOITER (3).

use serde::{Deserialize, Serialize};

/// PX4 main modes.
pub mod main {
    /// Manual.
    pub const MANUAL: u8 = 1;
    /// Altitude control.
    pub const ALTCTL: u8 = 2;
    /// Position control.
    pub const POSCTL: u8 = 3;
    /// Auto (sub modes below).
    pub const AUTO: u8 = 4;
    /// Acro.
    pub const ACRO: u8 = 5;
    /// Offboard.
    pub const OFFBOARD: u8 = 6;
    /// Stabilized.
    pub const STABILIZED: u8 = 7;
}

/// PX4 AUTO sub modes.
pub mod auto {
    /// Ready.
    pub const READY: u8 = 1;
    /// Takeoff.
    pub const TAKEOFF: u8 = 2;
    /// Loiter (HOLD).
    pub const LOITER: u8 = 3;
    /// Mission.
    pub const MISSION: u8 = 4;
    /// Return to launch.
    pub const RTL: u8 = 5;
    /// Land.
    pub const LAND: u8 = 6;
}

/// A PX4 mode: main mode and, for AUTO, a sub mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Px4Mode {
    /// Main mode.
    pub main: u8,
    /// Sub mode (0 when the main mode has none).
    pub sub: u8,
}

impl Px4Mode {
    /// OFFBOARD.
    pub const OFFBOARD: Px4Mode = Px4Mode {
        main: main::OFFBOARD,
        sub: 0,
    };
    /// HOLD (AUTO.LOITER).
    pub const HOLD: Px4Mode = Px4Mode {
        main: main::AUTO,
        sub: auto::LOITER,
    };
    /// AUTO.LAND.
    pub const LAND: Px4Mode = Px4Mode {
        main: main::AUTO,
        sub: auto::LAND,
    };
    /// AUTO.RTL.
    pub const RTL: Px4Mode = Px4Mode {
        main: main::AUTO,
        sub: auto::RTL,
    };
    /// AUTO.TAKEOFF.
    pub const TAKEOFF: Px4Mode = Px4Mode {
        main: main::AUTO,
        sub: auto::TAKEOFF,
    };
    /// POSCTL.
    pub const POSCTL: Px4Mode = Px4Mode {
        main: main::POSCTL,
        sub: 0,
    };

    /// Decodes `HEARTBEAT.custom_mode`.
    pub const fn from_custom_mode(custom_mode: u32) -> Px4Mode {
        Px4Mode {
            main: ((custom_mode >> 16) & 0xff) as u8,
            sub: ((custom_mode >> 24) & 0xff) as u8,
        }
    }

    /// Encodes as `HEARTBEAT.custom_mode`.
    pub const fn custom_mode(self) -> u32 {
        ((self.sub as u32) << 24) | ((self.main as u32) << 16)
    }

    /// A short name, e.g. `OFFBOARD`, `AUTO.LOITER`.
    pub fn name(self) -> String {
        let m = match self.main {
            main::MANUAL => "MANUAL",
            main::ALTCTL => "ALTCTL",
            main::POSCTL => "POSCTL",
            main::AUTO => "AUTO",
            main::ACRO => "ACRO",
            main::OFFBOARD => "OFFBOARD",
            main::STABILIZED => "STABILIZED",
            _ => return format!("MODE({}.{})", self.main, self.sub),
        };
        if self.main != main::AUTO {
            return m.to_string();
        }
        let s = match self.sub {
            auto::READY => "READY",
            auto::TAKEOFF => "TAKEOFF",
            auto::LOITER => "LOITER",
            auto::MISSION => "MISSION",
            auto::RTL => "RTL",
            auto::LAND => "LAND",
            _ => return format!("AUTO.{}", self.sub),
        };
        format!("AUTO.{s}")
    }

    /// True in modes where a pilot or a failsafe owns the vehicle, or an autopilot procedure is
    /// running that the companion must not interrupt (land, return, takeoff, manual modes).
    pub const fn owned_by_autopilot_or_pilot(self) -> bool {
        match self.main {
            main::OFFBOARD => false,
            main::AUTO => !matches!(self.sub, auto::LOITER | auto::READY),
            _ => true,
        }
    }
}

impl std::fmt::Display for Px4Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_mode_round_trips_and_matches_px4_packing() {
        assert_eq!(Px4Mode::OFFBOARD.custom_mode(), 6 << 16);
        assert_eq!(Px4Mode::HOLD.custom_mode(), (3 << 24) | (4 << 16));
        for m in [
            Px4Mode::OFFBOARD,
            Px4Mode::HOLD,
            Px4Mode::LAND,
            Px4Mode::RTL,
            Px4Mode::POSCTL,
        ] {
            assert_eq!(Px4Mode::from_custom_mode(m.custom_mode()), m);
        }
        assert_eq!(Px4Mode::HOLD.name(), "AUTO.LOITER");
    }
}
