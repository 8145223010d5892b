//! The job's device program, generated at run time from the devices it must not open: a
//! `BPF_PROG_TYPE_CGROUP_DEVICE` program with Slurm's policy (default allow; deny each listed
//! character device). Built instruction by instruction with `rbpf`'s builder, and run in `rbpf`'s
//! interpreter by the unit tests, so its decisions are checked on every machine, root or not.
//!
//! The kernel hands the program a 12-byte context: a `u32` whose low 16 bits are the device type
//! (1 block, 2 char) and high 16 bits the access (mknod 1, read 2, write 4), then the major and
//! the minor. The program returns 1 to allow and 0 to deny.

use rbpf::insn_builder::{Arch, BpfCode, Cond, Instruction, IntoBytes, MemSize, Source};
use std::fmt;

/// The device type of a character device in the program's context.
pub const DEVICE_TYPE_CHAR: u32 = 2;

/// One character device a job may not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct CharDevice {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for CharDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c {}:{}", self.major, self.minor)
    }
}

/// Registers the program uses (r1 holds the context pointer on entry).
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R4: u8 = 4;
const R5: u8 = 5;

/// Instructions each denied device takes: two compares, `r0 = 0`, `exit`.
const RULE_LEN: i16 = 4;

/// The bytecode of a program that denies exactly `denied` and allows every other device access.
pub fn device_program(denied: &[CharDevice]) -> Vec<u8> {
    let mut code = BpfCode::new();
    // r2 = type, r4 = major, r5 = minor.
    code.load_x(MemSize::Word).set_dst(R2).set_src(R1).set_off(0).push();
    code.bit_and(Source::Imm, Arch::X32).set_dst(R2).set_imm(0xffff).push();
    code.load_x(MemSize::Word).set_dst(R4).set_src(R1).set_off(4).push();
    code.load_x(MemSize::Word).set_dst(R5).set_src(R1).set_off(8).push();
    // Not a character device: straight to the final allow.
    let skip_all = i16::try_from(denied.len()).unwrap_or(i16::MAX).saturating_mul(RULE_LEN);
    code.jump_conditional(Cond::NotEquals, Source::Imm)
        .set_dst(R2)
        .set_imm(imm(DEVICE_TYPE_CHAR))
        .set_off(skip_all)
        .push();
    for device in denied {
        // Jump offsets count from the next instruction: both land on the next rule.
        code.jump_conditional(Cond::NotEquals, Source::Imm)
            .set_dst(R4)
            .set_imm(imm(device.major))
            .set_off(RULE_LEN - 1)
            .push();
        code.jump_conditional(Cond::NotEquals, Source::Imm)
            .set_dst(R5)
            .set_imm(imm(device.minor))
            .set_off(RULE_LEN - 2)
            .push();
        code.mov(Source::Imm, Arch::X64).set_dst(R0).set_imm(0).push();
        code.exit().push();
    }
    code.mov(Source::Imm, Arch::X64).set_dst(R0).set_imm(1).push();
    code.exit().push();
    (&code).into_bytes().to_vec()
}

/// A device number as the 32-bit immediate the compare instructions take. The kernel
/// sign-extends the immediate to 64 bits and compares it with the zero-extended loaded word, so
/// only numbers below 2^31 compare correctly; Linux majors have 12 bits and minors 20, so every
/// real device number fits (anything larger is clamped and matches no device).
fn imm(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCESS_READ_WRITE: u32 = 2 | 4;

    /// Runs the program in rbpf's interpreter on one access, as the kernel would call it.
    fn allows(program: &[u8], device_type: u32, major: u32, minor: u32) -> bool {
        let mut context = Vec::with_capacity(12);
        context.extend_from_slice(&(device_type | (ACCESS_READ_WRITE << 16)).to_ne_bytes());
        context.extend_from_slice(&major.to_ne_bytes());
        context.extend_from_slice(&minor.to_ne_bytes());
        let vm = rbpf::EbpfVmRaw::new(Some(program)).expect("rbpf accepts the program");
        match vm.execute_program(&mut context).expect("the program runs") {
            0 => false,
            1 => true,
            other => panic!("the program returned {other}"),
        }
    }

    #[test]
    fn denies_exactly_the_listed_character_devices() {
        let denied = [
            CharDevice { major: 195, minor: 0 },
            CharDevice { major: 195, minor: 2 },
            CharDevice { major: 511, minor: 21 },
        ];
        let program = device_program(&denied);
        for device in denied {
            assert!(!allows(&program, DEVICE_TYPE_CHAR, device.major, device.minor), "{device} must be denied");
        }
        // The allocated GPU, nvidiactl, nvidia-uvm-like and ordinary devices stay open.
        for (major, minor) in [(195, 1), (195, 3), (195, 255), (195, 254), (511, 22), (1, 3), (0, 0)] {
            assert!(allows(&program, DEVICE_TYPE_CHAR, major, minor), "c {major}:{minor} must be allowed");
        }
        // A block device with a denied number is a different device.
        assert!(allows(&program, 1, 195, 0));
    }

    #[test]
    fn an_empty_list_allows_everything() {
        let program = device_program(&[]);
        assert!(allows(&program, DEVICE_TYPE_CHAR, 195, 0));
        assert!(allows(&program, 1, 8, 0));
    }

    #[test]
    fn the_high_half_of_the_first_word_is_the_access_not_the_type() {
        let program = device_program(&[CharDevice { major: 195, minor: 7 }]);
        let mut context = Vec::new();
        // mknod access only.
        context.extend_from_slice(&(DEVICE_TYPE_CHAR | (1 << 16)).to_ne_bytes());
        context.extend_from_slice(&195u32.to_ne_bytes());
        context.extend_from_slice(&7u32.to_ne_bytes());
        let vm = rbpf::EbpfVmRaw::new(Some(&program)).expect("rbpf accepts the program");
        assert_eq!(vm.execute_program(&mut context).expect("runs"), 0);
    }

    #[test]
    fn the_largest_linux_device_numbers_compare_exactly() {
        let (major, minor) = ((1 << 12) - 1, (1 << 20) - 1);
        let program = device_program(&[CharDevice { major, minor }]);
        assert!(!allows(&program, DEVICE_TYPE_CHAR, major, minor));
        assert!(allows(&program, DEVICE_TYPE_CHAR, major, minor - 1));
    }
}
