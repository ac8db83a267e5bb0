//! The approval chooser's menu is the protocol crate's
//! ([`familiar_protocol::display::chooser`]: `familiar approve --dmenu` shows the same
//! one); here, the answer a choice gives the broker when the daemon opens it (an
//! approval notification clicked).
//!
//! Invariant: a choice answers as the same choice on the bus does (`Respond`, `Grant`
//! for [`GRANT_FOR`]).

use familiar_protocol::display::chooser::{Choice, GRANT_FOR};

use super::Answer;

/// The broker's answer for `choice`.
pub fn answer(choice: Choice) -> Answer {
    match choice {
        Choice::Deny => Answer::Deny,
        Choice::Approve => Answer::Approve,
        Choice::GrantTask => Answer::ApproveFor(GRANT_FOR),
    }
}
