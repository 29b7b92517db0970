//! Volatile access to memory-mapped registers, raw or with named fields.
//!
//! A register with named fields is a [`TypedRegister<R>`], where `R` is an uninhabited type
//! standing for one register (say `Hprt0`) that carries the register's [`Field`]s as
//! associated constants (`Hprt0::ENABLE`). A field of one register cannot be read from or
//! written to another: the compiler checks it. Values are composed as [`FieldValue`]s
//! (`Hcchar::ENDPOINT.val(1) + Hcchar::ENABLE.set()`) and read back from a [`Value`], one
//! volatile read that fields are then taken from. Everything is `const` or
//! `#[inline(always)]` and compiles to the same shifts and masks as hand-written code.
//!
//! [`Register`] is the raw form (a `u32` in, a `u32` out), for registers whose fields are not
//! named yet and for plain data registers.
//!
//! Every access is preceded by a data memory barrier ([`barrier`]). The BCM2835 returns reads
//! from different peripherals out of order unless a barrier separates them ("BCM2835 ARM
//! Peripherals" §1.3: "a memory write barrier before the first write to a peripheral and a
//! memory read barrier after the last read of a peripheral"); a barrier before every access
//! keeps the rule at every switch between peripherals without each driver having to know
//! which peripheral was touched last. An interrupt can fall between an access's barrier and
//! the access itself, so the IRQ exit path (boot/src/start.s) has one more: the board-rules
//! plugin found exactly that case (an IRQ between the DMB and a DWC2 store). This is the choice Linux makes for ARMv6 (its `readl`
//! and `writel` carry a barrier each). It costs two instructions per access (`mov`, `mcr`);
//! QEMU's board-rules plugin (qemu/plugin/boardrules.c) checks the rule on every boot of the
//! test command.
//!
//! Host unit tests replace the bus with a model ([`mock`]) that sees every read, write and
//! barrier, so drivers can be run against a recording register model.

use core::marker::PhantomData;
use core::ops::Add;

/// Data memory barrier (ARMv6 CP15 c7, c10, 5): accesses before it are ordered before
/// accesses after it. Called before every register access (see the module notes).
#[inline(always)]
pub fn barrier() {
    #[cfg(test)]
    mock::barrier();
    #[cfg(target_arch = "arm")]
    // SAFETY: a barrier has no effect on memory safety.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c10, 5", in(reg) 0u32, options(nostack, preserves_flags))
    }
    #[cfg(not(target_arch = "arm"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

/// One 32-bit memory-mapped register, read and written as a raw `u32`.
#[derive(Clone, Copy, Debug)]
pub struct Register {
    address: usize,
}

impl Register {
    /// The register at `base + offset`.
    ///
    /// # Safety
    /// The address must be a valid, mapped device register for the life of the program.
    pub const unsafe fn at(base: usize, offset: usize) -> Self {
        Self {
            address: base + offset,
        }
    }

    /// Reads the register.
    #[inline(always)]
    pub fn read(self) -> u32 {
        barrier();
        #[cfg(test)]
        if let Some(value) = mock::read(self.address) {
            return value;
        }
        // SAFETY: `at`'s contract makes the address a mapped register.
        unsafe { core::ptr::read_volatile(self.address as *const u32) }
    }

    /// Writes the register.
    #[inline(always)]
    pub fn write(self, value: u32) {
        barrier();
        #[cfg(test)]
        if mock::write(self.address, value) {
            return;
        }
        // SAFETY: `at`'s contract makes the address a mapped register.
        unsafe { core::ptr::write_volatile(self.address as *mut u32, value) }
    }

    /// Reads, changes the bits in `mask` to those of `value`, writes back.
    #[inline(always)]
    pub fn modify(self, mask: u32, value: u32) {
        self.write((self.read() & !mask) | (value & mask));
    }
}

/// A field of register `R`: `width` contiguous bits from bit `shift`.
pub struct Field<R> {
    /// The field's bits, in place.
    mask: u32,
    shift: u32,
    register: PhantomData<R>,
}

impl<R> Field<R> {
    /// The field of bits `high` down to `low`, as datasheets write it (`[18:17]` is
    /// `bits(18, 17)`).
    pub const fn bits(high: u32, low: u32) -> Self {
        assert!(high < 32 && low <= high);
        let width = high - low + 1;
        let ones = if width == 32 {
            u32::MAX
        } else {
            (1 << width) - 1
        };
        Self {
            mask: ones << low,
            shift: low,
            register: PhantomData,
        }
    }

    /// The one-bit field at bit `n` (below 32: a larger `n` fails to compile in a constant
    /// and overflows the shift at run time).
    pub const fn bit(n: u32) -> Self {
        Self {
            mask: 1 << n,
            shift: n,
            register: PhantomData,
        }
    }

    /// The field's bits in place in the register.
    pub const fn mask(self) -> u32 {
        self.mask
    }

    /// The field set to `value` (the bits beyond the field's width are dropped).
    pub const fn val(self, value: u32) -> FieldValue<R> {
        FieldValue {
            mask: self.mask,
            value: (value << self.shift) & self.mask,
            register: PhantomData,
        }
    }

    /// The field with every bit set (for a one-bit field: the flag on).
    pub const fn set(self) -> FieldValue<R> {
        FieldValue {
            mask: self.mask,
            value: self.mask,
            register: PhantomData,
        }
    }

    /// The field with every bit clear.
    pub const fn clear(self) -> FieldValue<R> {
        self.val(0)
    }
}

impl<R> Clone for Field<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Field<R> {}

/// Values for some fields of register `R`; the other fields are left out. Combine with `+`
/// (or [`FieldValue::and`] in constants).
pub struct FieldValue<R> {
    /// The bits the named fields cover.
    mask: u32,
    /// The named fields' values, in place.
    value: u32,
    register: PhantomData<R>,
}

impl<R> FieldValue<R> {
    /// No fields.
    pub const NONE: Self = Self {
        mask: 0,
        value: 0,
        register: PhantomData,
    };

    /// These fields and `other`'s (fields in both take `other`'s value).
    pub const fn and(self, other: Self) -> Self {
        Self {
            mask: self.mask | other.mask,
            value: (self.value & !other.mask) | other.value,
            register: PhantomData,
        }
    }

    /// The bits the named fields cover, in place.
    pub const fn mask(self) -> u32 {
        self.mask
    }

    /// The register value with the named fields at their values and every other bit 0.
    pub const fn bits(self) -> u32 {
        self.value
    }
}

impl<R> Add for FieldValue<R> {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        self.and(other)
    }
}

impl<R> Clone for FieldValue<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for FieldValue<R> {}

/// The fields of a register that has none named: the value is one word (a DMA address, an
/// identifier, a register only ever written 0).
pub enum Word {}
impl Word {
    /// The whole register.
    pub const ALL: Field<Self> = Field::bits(31, 0);
}

/// A value of register `R`: read once, then taken apart field by field.
pub struct Value<R> {
    bits: u32,
    register: PhantomData<R>,
}

impl<R> Value<R> {
    /// The value with these raw bits (for values kept outside the register, such as
    /// interrupt status bits collected by a handler).
    pub const fn from_bits(bits: u32) -> Self {
        Self {
            bits,
            register: PhantomData,
        }
    }

    /// The value with the named fields at their values and every other bit 0.
    pub const fn of(fields: FieldValue<R>) -> Self {
        Self::from_bits(fields.value)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.bits
    }

    /// The value of `field`.
    pub const fn get(self, field: Field<R>) -> u32 {
        (self.bits & field.mask) >> field.shift
    }

    /// Whether any bit of `field` is set (for a one-bit field: whether the flag is on).
    pub const fn is_set(self, field: Field<R>) -> bool {
        self.bits & field.mask != 0
    }

    /// Whether any bit that `fields` covers is set, whatever values they name (to ask "any
    /// of these flags?").
    pub const fn any(self, fields: FieldValue<R>) -> bool {
        self.bits & fields.mask != 0
    }

    /// Whether every named field has its value.
    pub const fn matches(self, fields: FieldValue<R>) -> bool {
        self.bits & fields.mask == fields.value
    }

    /// This value with the named fields replaced.
    pub const fn with(self, fields: FieldValue<R>) -> Self {
        Self::from_bits((self.bits & !fields.mask) | fields.value)
    }

    /// This value with every bit the named fields cover cleared.
    pub const fn without(self, fields: FieldValue<R>) -> Self {
        Self::from_bits(self.bits & !fields.mask)
    }

    /// This value and the bits of `other` (to collect status bits).
    pub const fn union(self, other: Self) -> Self {
        Self::from_bits(self.bits | other.bits)
    }
}

impl<R> Clone for Value<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Value<R> {}
impl<R> PartialEq for Value<R> {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
    }
}
impl<R> Eq for Value<R> {}
impl<R> core::fmt::Debug for Value<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#010x}", self.bits)
    }
}
impl<R> core::fmt::LowerHex for Value<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::LowerHex::fmt(&self.bits, f)
    }
}

/// Where register `R` sits in its block.
pub struct Offset<R> {
    offset: usize,
    register: PhantomData<R>,
}

impl<R> Offset<R> {
    /// Register `R` at `offset` bytes from its block's base.
    pub const fn new(offset: usize) -> Self {
        Self {
            offset,
            register: PhantomData,
        }
    }

    /// The offset in bytes.
    pub const fn bytes(self) -> usize {
        self.offset
    }
}

impl<R> Clone for Offset<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Offset<R> {}

/// One 32-bit memory-mapped register with the named fields of `R`.
pub struct TypedRegister<R> {
    register: Register,
    fields: PhantomData<R>,
}

impl<R> TypedRegister<R> {
    /// Reads the register once.
    #[inline(always)]
    pub fn read(self) -> Value<R> {
        Value::from_bits(self.register.read())
    }

    /// Writes the named fields; every other bit is written as 0.
    #[inline(always)]
    pub fn write(self, fields: FieldValue<R>) {
        self.register.write(fields.value);
    }

    /// Writes a whole value (one read earlier and changed, say).
    #[inline(always)]
    pub fn write_value(self, value: Value<R>) {
        self.register.write(value.bits);
    }

    /// Reads, replaces the named fields, writes back. Not for registers with
    /// write-1-to-clear bits that read as 1: those would be cleared too.
    #[inline(always)]
    pub fn modify(self, fields: FieldValue<R>) {
        self.write_value(self.read().with(fields));
    }

    /// Whether any bit of `field` is set, in one read.
    #[inline(always)]
    pub fn is_set(self, field: Field<R>) -> bool {
        self.read().is_set(field)
    }
}

impl<R> Clone for TypedRegister<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for TypedRegister<R> {}

/// A block of registers at a fixed base address.
#[derive(Clone, Copy, Debug)]
pub struct RegisterBlock {
    base: usize,
}

impl RegisterBlock {
    /// A block at `base`.
    ///
    /// # Safety
    /// `base` plus every offset later used must be mapped device registers.
    pub const unsafe fn new(base: usize) -> Self {
        Self { base }
    }

    /// The register at `offset` from the base, raw.
    #[inline(always)]
    pub fn register(self, offset: usize) -> Register {
        // SAFETY: `new`'s contract covers every offset the driver uses.
        unsafe { Register::at(self.base, offset) }
    }

    /// Register `R`, with its named fields.
    #[inline(always)]
    pub fn at<R>(self, offset: Offset<R>) -> TypedRegister<R> {
        TypedRegister {
            register: self.register(offset.offset),
            fields: PhantomData,
        }
    }

    /// The block of registers `offset` bytes into this one (a DWC2 host channel's, say).
    ///
    /// # Safety
    /// `base + offset` plus every offset later used on the result must be mapped device
    /// registers.
    pub const unsafe fn sub_block(self, offset: usize) -> Self {
        Self {
            base: self.base + offset,
        }
    }

    /// The base address.
    pub const fn base(self) -> usize {
        self.base
    }
}

/// A register model for host tests: while a [`mock::Bus`] is installed on the test's thread,
/// every register access and barrier goes to it instead of memory.
#[cfg(test)]
pub mod mock {
    use std::boxed::Box;
    use std::cell::RefCell;

    /// A model of the peripherals a test drives.
    pub trait Bus {
        /// A read of the register at `address`.
        fn read(&mut self, address: usize) -> u32;
        /// A write of `value` to the register at `address`.
        fn write(&mut self, address: usize, value: u32);
        /// A data memory barrier.
        fn barrier(&mut self) {}
    }

    std::thread_local! {
        static BUS: RefCell<Option<Box<dyn Bus>>> = const { RefCell::new(None) };
    }

    /// While alive, `bus` answers every register access on this thread.
    pub struct Installed(());

    impl Drop for Installed {
        fn drop(&mut self) {
            BUS.with(|bus| bus.borrow_mut().take());
        }
    }

    /// Installs `bus` on this thread until the returned guard is dropped.
    pub fn install(bus: impl Bus + 'static) -> Installed {
        BUS.with(|slot| *slot.borrow_mut() = Some(Box::new(bus)));
        Installed(())
    }

    pub(super) fn read(address: usize) -> Option<u32> {
        BUS.with(|bus| bus.borrow_mut().as_mut().map(|bus| bus.read(address)))
    }

    pub(super) fn write(address: usize, value: u32) -> bool {
        BUS.with(|bus| {
            bus.borrow_mut()
                .as_mut()
                .map(|bus| bus.write(address, value))
                .is_some()
        })
    }

    pub(super) fn barrier() {
        BUS.with(|bus| {
            if let Some(bus) = bus.borrow_mut().as_mut() {
                bus.barrier();
            }
        });
    }

    /// The peripheral a register address belongs to, as the board-rules judge counts them:
    /// its 4 KiB page of the peripheral window, except that the USB controller's 128 KiB is one
    /// peripheral. `None` outside the peripheral window.
    pub fn peripheral_of(address: usize) -> Option<usize> {
        use crate::memory_map::{PERIPHERAL_BASE, PERIPHERAL_SIZE, USB};
        if !(PERIPHERAL_BASE..PERIPHERAL_BASE + PERIPHERAL_SIZE).contains(&address) {
            return None;
        }
        if (USB..USB + 0x2_0000).contains(&address) {
            return Some(USB);
        }
        Some(address & !0xFFF)
    }

    /// Checks the barrier rule on a stream of accesses: every switch from one peripheral's
    /// registers to another's has a barrier between them.
    #[derive(Default, Debug)]
    pub struct BarrierJudge {
        last: Option<usize>,
        barrier_since: bool,
        /// Switches between peripherals seen.
        pub switches: u32,
        /// Switches without a barrier between them, with the two peripherals.
        pub violations: std::vec::Vec<(usize, usize)>,
    }

    impl BarrierJudge {
        /// Notes an access to `address`.
        pub fn access(&mut self, address: usize) {
            let Some(peripheral) = peripheral_of(address) else {
                return;
            };
            if let Some(last) = self.last
                && last != peripheral
            {
                self.switches += 1;
                if !self.barrier_since {
                    self.violations.push((last, peripheral));
                }
            }
            self.last = Some(peripheral);
            self.barrier_since = false;
        }

        /// Notes a barrier.
        pub fn barrier(&mut self) {
            self.barrier_since = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timer and EMMC registers, answering 0, with the barrier rule checked.
    struct Judged(std::rc::Rc<std::cell::RefCell<mock::BarrierJudge>>);

    impl mock::Bus for Judged {
        fn read(&mut self, address: usize) -> u32 {
            self.0.borrow_mut().access(address);
            0
        }
        fn write(&mut self, address: usize, _value: u32) {
            self.0.borrow_mut().access(address);
        }
        fn barrier(&mut self) {
            self.0.borrow_mut().barrier();
        }
    }

    #[test]
    fn every_switch_between_peripherals_has_a_barrier() {
        let judge = std::rc::Rc::new(std::cell::RefCell::new(mock::BarrierJudge::default()));
        let _bus = mock::install(Judged(judge.clone()));
        // SAFETY: the accesses go to the mock.
        let (timer, emmc, usb) = unsafe {
            (
                RegisterBlock::new(crate::memory_map::SYSTEM_TIMER),
                RegisterBlock::new(crate::memory_map::EMMC),
                RegisterBlock::new(crate::memory_map::USB),
            )
        };
        for _ in 0..3 {
            timer.register(4).read();
            emmc.register(0x30).write(1);
            emmc.register(0x2C).modify(1, 1);
            usb.register(0x500).read();
            usb.register(0x1000).write(0);
        }
        let judge = judge.borrow();
        assert_eq!(judge.switches, 8);
        assert!(judge.violations.is_empty(), "{:x?}", judge.violations);
    }

    #[test]
    fn the_judge_sees_a_switch_without_a_barrier() {
        let mut judge = mock::BarrierJudge::default();
        judge.access(crate::memory_map::SYSTEM_TIMER);
        judge.barrier();
        judge.access(crate::memory_map::EMMC);
        judge.access(crate::memory_map::EMMC + 4);
        judge.access(crate::memory_map::UART0);
        judge.access(0x1000); // RAM: not a peripheral
        assert_eq!(judge.switches, 2);
        assert_eq!(
            judge.violations,
            [(crate::memory_map::EMMC, crate::memory_map::UART0)]
        );
    }

    enum Example {}
    impl Example {
        const FLAG: Field<Self> = Field::bit(3);
        const SPEED: Field<Self> = Field::bits(18, 17);
        const WORD: Field<Self> = Field::bits(31, 0);
    }

    #[test]
    fn fields_are_shifted_and_masked_into_place() {
        assert_eq!(Example::FLAG.mask(), 1 << 3);
        assert_eq!(Example::SPEED.mask(), 3 << 17);
        assert_eq!(Example::WORD.mask(), u32::MAX);
        assert_eq!(Example::SPEED.val(2).bits(), 2 << 17);
        // Bits beyond the width are dropped, never spill into the neighbours.
        assert_eq!(Example::SPEED.val(7).bits(), 3 << 17);
        assert_eq!(Example::WORD.val(0x1234_5678).bits(), 0x1234_5678);
    }

    #[test]
    fn values_compose_and_decompose() {
        let fields = Example::FLAG.set() + Example::SPEED.val(1);
        assert_eq!(fields.bits(), (1 << 3) | (1 << 17));
        assert_eq!(fields.mask(), (1 << 3) | (3 << 17));
        let value = Value::<Example>::from_bits(0xFFFF_FFFF).with(fields);
        assert_eq!(value.get(Example::SPEED), 1);
        assert!(value.is_set(Example::FLAG));
        assert!(value.matches(fields));
        let cleared = value.without(Example::FLAG.set());
        assert!(!cleared.is_set(Example::FLAG));
        assert!(!cleared.matches(fields));
        assert!(cleared.any(fields), "SPEED's low bit is still set");
        // A later value for the same field wins.
        let again = Example::SPEED.val(1).and(Example::SPEED.val(2));
        assert_eq!(again.bits(), 2 << 17);
    }
}
