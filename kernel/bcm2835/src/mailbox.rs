//! The VideoCore mailbox property channel (channel 8): message encoding, checked decoding, and
//! the hardware transport.
//!
//! A property message is a 16-byte aligned array of 32-bit words:
//! `[total size in bytes, code, (tag id, value buffer size, request/response size, value...)*,
//! 0 (end tag), padding]`. The firmware answers in place: code `0x8000_0000` for success and,
//! in each tag, the size word with bit 31 set and the response length in the low bits.
//! Source: the Raspberry Pi firmware wiki "Mailbox property interface".

use crate::mmio::RegisterBlock;

/// Tag identifiers used by the kernel.
pub mod tag {
    /// Firmware revision (response: 1 word).
    pub const FIRMWARE_REVISION: u32 = 0x0000_0001;
    /// Board revision code (response: 1 word).
    pub const BOARD_REVISION: u32 = 0x0001_0002;
    /// Board MAC address (response: 6 bytes).
    pub const BOARD_MAC_ADDRESS: u32 = 0x0001_0003;
    /// Board serial number (response: 2 words).
    pub const BOARD_SERIAL: u32 = 0x0001_0004;
    /// ARM memory base and size (response: 2 words).
    pub const ARM_MEMORY: u32 = 0x0001_0005;
    /// Power state of a device (request: device id; response: id, state).
    pub const GET_POWER_STATE: u32 = 0x0002_0001;
    /// Sets a device's power state (request: id, state; response: id, state).
    pub const SET_POWER_STATE: u32 = 0x0002_8001;
    /// Current rate of a clock (request: clock id; response: id, rate in Hz).
    pub const GET_CLOCK_RATE: u32 = 0x0003_0002;
    /// Maximum rate of a clock.
    pub const GET_MAX_CLOCK_RATE: u32 = 0x0003_0004;
    /// Sets a clock rate (request: id, rate, skip turbo).
    pub const SET_CLOCK_RATE: u32 = 0x0003_8002;
    /// Sets a firmware power domain's state (request: domain, state). Domains are Linux's
    /// `RPI_POWER_DOMAIN_*` plus one (Linux `raspberrypi-power.c`).
    pub const SET_DOMAIN_STATE: u32 = 0x0003_8030;
}

/// Firmware power domains for [`tag::SET_DOMAIN_STATE`].
pub mod domain {
    /// The HDMI encoder and PHY.
    pub const HDMI: u32 = 6;
    /// The composite video encoder (VEC).
    pub const COMPOSITE: u32 = 8;
}

/// Device identifiers for the power tags.
pub mod device {
    /// The SD card controller.
    pub const SD_CARD: u32 = 0;
    /// UART0.
    pub const UART0: u32 = 1;
    /// The USB host controller (DWC2).
    pub const USB_HCD: u32 = 3;
}

/// Clock identifiers for the clock tags.
pub mod clock {
    /// The EMMC controller's base clock.
    pub const EMMC: u32 = 1;
    /// The UART reference clock.
    pub const UART: u32 = 2;
    /// The ARM core clock.
    pub const ARM: u32 = 3;
    /// The VideoCore core clock.
    pub const CORE: u32 = 4;
}

const REQUEST_CODE: u32 = 0;
const RESPONSE_SUCCESS: u32 = 0x8000_0000;
const RESPONSE_ERROR: u32 = 0x8000_0001;
const TAG_RESPONSE: u32 = 1 << 31;

/// Why a property call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MailboxError {
    /// The message does not fit in the buffer.
    BufferTooSmall,
    /// The firmware did not answer within the deadline.
    Timeout,
    /// The firmware reported that it could not parse the request (code 0x8000_0001).
    RequestRejected,
    /// The response code was neither success nor error: the buffer was not processed.
    NotProcessed(u32),
    /// A tag was not answered (its size word lacks bit 31): the firmware does not know it.
    TagNotAnswered(u32),
    /// A tag's response is shorter than the caller needs, or overruns the value buffer.
    ShortResponse(u32),
}

/// Where a tag's value buffer sits in a message, returned by [`MessageBuilder::add`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagSlot {
    tag: u32,
    /// Index of the tag id word.
    offset: usize,
    /// Value buffer size in words.
    value_words: usize,
}

/// Builds a property message into a word buffer.
pub struct MessageBuilder<'a> {
    words: &'a mut [u32],
    len: usize,
}

impl<'a> MessageBuilder<'a> {
    /// Starts a message in `words` (the hardware needs it 16-byte aligned).
    pub fn new(words: &'a mut [u32]) -> Result<Self, MailboxError> {
        if words.len() < 3 {
            return Err(MailboxError::BufferTooSmall);
        }
        Ok(Self { words, len: 2 })
    }

    /// Adds a tag with `request` words and room for `response_words` words of answer.
    pub fn add(
        &mut self,
        tag: u32,
        request: &[u32],
        response_words: usize,
    ) -> Result<TagSlot, MailboxError> {
        let value_words = request.len().max(response_words);
        let needed = self.len + 3 + value_words + 1;
        if needed > self.words.len() {
            return Err(MailboxError::BufferTooSmall);
        }
        let offset = self.len;
        self.words[offset] = tag;
        self.words[offset + 1] = (value_words * 4) as u32;
        self.words[offset + 2] = (request.len() * 4) as u32;
        let values = &mut self.words[offset + 3..offset + 3 + value_words];
        values.fill(0);
        values[..request.len()].copy_from_slice(request);
        self.len += 3 + value_words;
        Ok(TagSlot {
            tag,
            offset,
            value_words,
        })
    }

    /// Writes the header and end tag; returns the message length in words (a multiple of 4,
    /// so that the size in bytes is 16-byte aligned).
    pub fn finish(self) -> usize {
        let mut total = self.len + 1;
        self.words[self.len] = 0;
        while !total.is_multiple_of(4) && total < self.words.len() {
            self.words[total] = 0;
            total += 1;
        }
        self.words[0] = (total * 4) as u32;
        self.words[1] = REQUEST_CODE;
        total
    }
}

/// Checks the response code of a processed message.
pub fn check_response(words: &[u32]) -> Result<(), MailboxError> {
    match words.get(1).copied() {
        Some(RESPONSE_SUCCESS) => Ok(()),
        Some(RESPONSE_ERROR) => Err(MailboxError::RequestRejected),
        Some(code) => Err(MailboxError::NotProcessed(code)),
        None => Err(MailboxError::BufferTooSmall),
    }
}

/// The answer to `slot`, at least `min_bytes` long, as words.
pub fn response(words: &[u32], slot: TagSlot, min_bytes: usize) -> Result<&[u32], MailboxError> {
    let header = words
        .get(slot.offset..slot.offset + 3)
        .ok_or(MailboxError::ShortResponse(slot.tag))?;
    if header[0] != slot.tag || header[2] & TAG_RESPONSE == 0 {
        return Err(MailboxError::TagNotAnswered(slot.tag));
    }
    let length = (header[2] & !TAG_RESPONSE) as usize;
    if length < min_bytes || length > slot.value_words * 4 {
        return Err(MailboxError::ShortResponse(slot.tag));
    }
    let start = slot.offset + 3;
    Ok(&words[start..start + slot.value_words])
}

/// Board facts read from the firmware at boot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoardInfo {
    /// Firmware revision (a build timestamp).
    pub firmware_revision: u32,
    /// Board revision code (see [`crate::revision`]).
    pub board_revision: u32,
    /// Board serial number.
    pub serial: u64,
    /// MAC address assigned to the on-board Ethernet.
    pub mac_address: [u8; 6],
    /// Base of the RAM given to the ARM.
    pub arm_memory_base: u32,
    /// Size of the RAM given to the ARM, in bytes.
    pub arm_memory_size: u32,
    /// UART reference clock in Hz.
    pub uart_clock_hz: u32,
    /// ARM core clock in Hz.
    pub arm_clock_hz: u32,
    /// EMMC base clock in Hz.
    pub emmc_clock_hz: u32,
}

/// Encodes the one message that asks for every [`BoardInfo`] field. Returns the slots in field
/// order: firmware, revision, MAC, serial, memory, UART clock, ARM clock, EMMC clock.
pub fn encode_board_info(words: &mut [u32]) -> Result<[TagSlot; 8], MailboxError> {
    let mut message = MessageBuilder::new(words)?;
    let slots = [
        message.add(tag::FIRMWARE_REVISION, &[], 1)?,
        message.add(tag::BOARD_REVISION, &[], 1)?,
        message.add(tag::BOARD_MAC_ADDRESS, &[], 2)?,
        message.add(tag::BOARD_SERIAL, &[], 2)?,
        message.add(tag::ARM_MEMORY, &[], 2)?,
        message.add(tag::GET_CLOCK_RATE, &[clock::UART], 2)?,
        message.add(tag::GET_CLOCK_RATE, &[clock::ARM], 2)?,
        message.add(tag::GET_CLOCK_RATE, &[clock::EMMC], 2)?,
    ];
    message.finish();
    Ok(slots)
}

/// Decodes the answer to [`encode_board_info`].
pub fn decode_board_info(words: &[u32], slots: &[TagSlot; 8]) -> Result<BoardInfo, MailboxError> {
    check_response(words)?;
    let mac_words = response(words, slots[2], 6)?;
    let mut mac_address = [0; 6];
    mac_address[..4].copy_from_slice(&mac_words[0].to_le_bytes());
    mac_address[4..].copy_from_slice(&mac_words[1].to_le_bytes()[..2]);
    let serial = response(words, slots[3], 8)?;
    let memory = response(words, slots[4], 8)?;
    Ok(BoardInfo {
        firmware_revision: response(words, slots[0], 4)?[0],
        board_revision: response(words, slots[1], 4)?[0],
        serial: ((serial[1] as u64) << 32) | serial[0] as u64,
        mac_address,
        arm_memory_base: memory[0],
        arm_memory_size: memory[1],
        uart_clock_hz: response(words, slots[5], 8)?[1],
        arm_clock_hz: response(words, slots[6], 8)?[1],
        emmc_clock_hz: response(words, slots[7], 8)?[1],
    })
}

const READ: usize = 0x00;
const STATUS_READ: usize = 0x18;
const WRITE: usize = 0x20;
const STATUS_WRITE: usize = 0x38;
const STATUS_FULL: u32 = 1 << 31;
const STATUS_EMPTY: u32 = 1 << 30;
/// The property channel (ARM to VideoCore).
pub const PROPERTY_CHANNEL: u32 = 8;

/// A message buffer the GPU can read: 16-byte aligned.
#[repr(C, align(16))]
pub struct PropertyBuffer(pub [u32; 64]);

/// The mailbox hardware.
pub struct Mailbox {
    registers: RegisterBlock,
}

impl Mailbox {
    /// The mailbox at its BCM2835 address.
    ///
    /// # Safety
    /// Only one `Mailbox` may exist.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::MAILBOX is mailbox 0.
            registers: unsafe { RegisterBlock::new(crate::memory_map::MAILBOX) },
        }
    }

    /// Sends the message in `buffer` on the property channel and waits for the answer.
    /// `buffer` must be memory the GPU sees without cache maintenance (the `.dma` section).
    /// `now_micros` bounds every wait by `timeout_micros`.
    pub fn call(
        &self,
        buffer: &mut PropertyBuffer,
        now_micros: impl Fn() -> u64,
        timeout_micros: u64,
    ) -> Result<(), MailboxError> {
        let address = crate::bus_address(buffer.0.as_ptr() as usize);
        let deadline = now_micros() + timeout_micros;
        while self.registers.register(STATUS_WRITE).read() & STATUS_FULL != 0 {
            if now_micros() > deadline {
                return Err(MailboxError::Timeout);
            }
        }
        barrier();
        self.registers
            .register(WRITE)
            .write(address | PROPERTY_CHANNEL);
        loop {
            while self.registers.register(STATUS_READ).read() & STATUS_EMPTY != 0 {
                if now_micros() > deadline {
                    return Err(MailboxError::Timeout);
                }
            }
            let answer = self.registers.register(READ).read();
            if answer == address | PROPERTY_CHANNEL {
                barrier();
                return check_response(&buffer.0);
            }
        }
    }

    /// Reads every [`BoardInfo`] field in one call.
    pub fn board_info(
        &self,
        buffer: &mut PropertyBuffer,
        now_micros: impl Fn() -> u64,
    ) -> Result<BoardInfo, MailboxError> {
        let slots = encode_board_info(&mut buffer.0)?;
        self.call(buffer, now_micros, 100_000)?;
        decode_board_info(&buffer.0, &slots)
    }

    /// Sets the power state of `device_id`, waiting for it to settle. Returns whether it is
    /// now on; errors if the firmware says the device does not exist.
    pub fn set_power(
        &self,
        buffer: &mut PropertyBuffer,
        device_id: u32,
        on: bool,
        now_micros: impl Fn() -> u64,
    ) -> Result<bool, MailboxError> {
        let mut message = MessageBuilder::new(&mut buffer.0)?;
        let state = (on as u32) | (1 << 1); // bit 1: wait until the state is reached
        let slot = message.add(tag::SET_POWER_STATE, &[device_id, state], 2)?;
        message.finish();
        self.call(buffer, now_micros, 1_000_000)?;
        let answer = response(&buffer.0, slot, 8)?;
        if answer[1] & (1 << 1) != 0 {
            return Err(MailboxError::TagNotAnswered(tag::SET_POWER_STATE));
        }
        Ok(answer[1] & 1 != 0)
    }

    /// Switches a firmware power domain on or off.
    pub fn set_domain(
        &self,
        buffer: &mut PropertyBuffer,
        domain_id: u32,
        on: bool,
        now_micros: impl Fn() -> u64,
    ) -> Result<(), MailboxError> {
        let mut message = MessageBuilder::new(&mut buffer.0)?;
        let slot = message.add(tag::SET_DOMAIN_STATE, &[domain_id, on as u32], 2)?;
        message.finish();
        self.call(buffer, now_micros, 100_000)?;
        response(&buffer.0, slot, 8).map(|_| ())
    }

    /// Sets `clock_id` to `hz`; returns the rate the firmware chose.
    pub fn set_clock_rate(
        &self,
        buffer: &mut PropertyBuffer,
        clock_id: u32,
        hz: u32,
        now_micros: impl Fn() -> u64,
    ) -> Result<u32, MailboxError> {
        let mut message = MessageBuilder::new(&mut buffer.0)?;
        let slot = message.add(tag::SET_CLOCK_RATE, &[clock_id, hz, 0], 2)?;
        message.finish();
        self.call(buffer, now_micros, 100_000)?;
        Ok(response(&buffer.0, slot, 8)?[1])
    }

    /// Reads the current rate of `clock_id` in Hz.
    pub fn clock_rate(
        &self,
        buffer: &mut PropertyBuffer,
        clock_id: u32,
        now_micros: impl Fn() -> u64,
    ) -> Result<u32, MailboxError> {
        let mut message = MessageBuilder::new(&mut buffer.0)?;
        let slot = message.add(tag::GET_CLOCK_RATE, &[clock_id], 2)?;
        message.finish();
        self.call(buffer, now_micros, 100_000)?;
        Ok(response(&buffer.0, slot, 8)?[1])
    }
}

#[cfg(target_arch = "arm")]
fn barrier() {
    // SAFETY: a data memory barrier has no effect on memory safety.
    unsafe { core::arch::asm!("mcr p15, 0, {0}, c7, c10, 5", in(reg) 0u32, options(nostack)) }
}

#[cfg(not(target_arch = "arm"))]
fn barrier() {
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the firmware would write back for `words` given per-tag answers.
    fn answer(words: &mut [u32], slots: &[TagSlot], answers: &[&[u32]]) {
        words[1] = RESPONSE_SUCCESS;
        for (slot, values) in slots.iter().zip(answers) {
            words[slot.offset + 2] = TAG_RESPONSE | (values.len() * 4) as u32;
            words[slot.offset + 3..slot.offset + 3 + values.len()].copy_from_slice(values);
        }
    }

    #[test]
    fn single_tag_message_has_the_documented_layout() {
        let mut words = [0xFFFF_FFFFu32; 16];
        let mut message = MessageBuilder::new(&mut words).unwrap();
        let slot = message.add(tag::GET_CLOCK_RATE, &[clock::UART], 2).unwrap();
        let len = message.finish();
        assert_eq!(len, 8);
        assert_eq!(
            &words[..8],
            &[32, 0, tag::GET_CLOCK_RATE, 8, 4, clock::UART, 0, 0]
        );
        assert_eq!(slot.offset, 2);
    }

    #[test]
    fn message_size_is_padded_to_16_bytes() {
        let mut words = [0u32; 16];
        let mut message = MessageBuilder::new(&mut words).unwrap();
        message.add(tag::BOARD_REVISION, &[], 1).unwrap();
        let len = message.finish();
        // header 2 + tag 3 + value 1 + end 1 = 7 -> padded to 8 words.
        assert_eq!(len, 8);
        assert_eq!(words[0], 32);
        assert_eq!(words[6], 0, "end tag");
    }

    #[test]
    fn too_small_buffer_is_an_error_not_a_panic() {
        let mut words = [0u32; 6];
        let mut message = MessageBuilder::new(&mut words).unwrap();
        assert_eq!(
            message.add(tag::ARM_MEMORY, &[], 2),
            Err(MailboxError::BufferTooSmall)
        );
        assert!(MessageBuilder::new(&mut [0u32; 2]).is_err());
    }

    #[test]
    fn board_info_round_trip() {
        let mut words = [0u32; 64];
        let slots = encode_board_info(&mut words).unwrap();
        answer(
            &mut words,
            &slots,
            &[
                &[0x5f3d_2a4c],
                &[0x0090_0032],
                &[0x00eb_27b8 | (0x12 << 24), 0x5634],
                &[0x89ab_cdef, 0x0000_0001],
                &[0, 448 << 20],
                &[clock::UART, 48_000_000],
                &[clock::ARM, 700_000_000],
                &[clock::EMMC, 250_000_000],
            ],
        );
        let info = decode_board_info(&words, &slots).unwrap();
        assert_eq!(info.board_revision, 0x0090_0032);
        assert_eq!(info.mac_address, [0xb8, 0x27, 0xeb, 0x12, 0x34, 0x56]);
        assert_eq!(info.serial, 0x1_89ab_cdef);
        assert_eq!(info.arm_memory_size, 448 << 20);
        assert_eq!(info.uart_clock_hz, 48_000_000);
        assert_eq!(info.arm_clock_hz, 700_000_000);
        assert_eq!(info.emmc_clock_hz, 250_000_000);
        assert_eq!(info.firmware_revision, 0x5f3d_2a4c);
    }

    #[test]
    fn unanswered_tag_and_error_codes_are_reported() {
        let mut words = [0u32; 64];
        let slots = encode_board_info(&mut words).unwrap();
        assert_eq!(
            decode_board_info(&words, &slots),
            Err(MailboxError::NotProcessed(0))
        );
        words[1] = RESPONSE_ERROR;
        assert_eq!(
            decode_board_info(&words, &slots),
            Err(MailboxError::RequestRejected)
        );
        words[1] = RESPONSE_SUCCESS;
        assert_eq!(
            decode_board_info(&words, &slots),
            Err(MailboxError::TagNotAnswered(tag::BOARD_MAC_ADDRESS))
        );
    }

    #[test]
    fn short_or_overlong_response_is_rejected() {
        let mut words = [0u32; 16];
        let mut message = MessageBuilder::new(&mut words).unwrap();
        let slot = message.add(tag::ARM_MEMORY, &[], 2).unwrap();
        message.finish();
        words[1] = RESPONSE_SUCCESS;
        words[slot.offset + 2] = TAG_RESPONSE | 4;
        assert_eq!(
            response(&words, slot, 8),
            Err(MailboxError::ShortResponse(tag::ARM_MEMORY))
        );
        words[slot.offset + 2] = TAG_RESPONSE | 64;
        assert_eq!(
            response(&words, slot, 8),
            Err(MailboxError::ShortResponse(tag::ARM_MEMORY))
        );
        words[slot.offset + 2] = TAG_RESPONSE | 8;
        assert!(response(&words, slot, 8).is_ok());
    }
}
