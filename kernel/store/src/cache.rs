//! The RAM cache of body segments: fixed-size pages, one segment each, found through a table
//! with one entry per segment, and replaced by CLOCK (a page that was used since the hand last
//! passed it gets a second chance), so that pages in use stay while a file streamed once
//! through the cache does not push them out. A page whose segment failed its checksum is kept
//! as unverified: only bodies that pass their own checksum are served from it.

/// What the table says about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentState {
    /// Not in RAM and not asked for.
    Absent,
    /// Waiting in the read queue.
    Queued,
    /// Being read from the card into a page.
    Reading,
    /// Its last read failed (card error or checksum); a new request reads it again.
    Failed,
    /// In RAM, verified, in this page.
    Cached(usize),
}

const ABSENT: u32 = 0;
const QUEUED: u32 = u32::MAX;
const READING: u32 = u32::MAX - 1;
const FAILED: u32 = u32::MAX - 2;
/// Largest page count the encoding allows (page `n` is stored as `n + 1`).
pub const MAX_PAGES: usize = (u32::MAX - 3) as usize;

/// One page of the cache.
#[derive(Debug)]
pub struct Page<'b> {
    /// The page's memory; `None` while it is lent to the card for a read.
    pub memory: Option<&'b mut [u8]>,
    /// The segment it holds (meaningful only while the table points here).
    segment: u32,
    /// Holds a segment.
    used: bool,
    /// Used since the CLOCK hand last passed.
    referenced: bool,
    /// The segment passed its checksum (otherwise only bodies that pass their own may be
    /// served from it).
    verified: bool,
}

impl<'b> Page<'b> {
    /// A free page over `memory` (one segment long).
    pub fn new(memory: &'b mut [u8]) -> Self {
        Self {
            memory: Some(memory),
            segment: 0,
            used: false,
            referenced: false,
            verified: false,
        }
    }
}

/// The cache: pages and the per-segment table.
#[derive(Debug)]
pub struct SegmentCache<'m, 'b> {
    pages: &'m mut [Page<'b>],
    table: &'m mut [u32],
    hand: usize,
    used: usize,
    evictions: u64,
}

impl<'m, 'b> SegmentCache<'m, 'b> {
    /// A cache with `pages` (each one segment long) for a site of `table.len()` segments.
    /// Pages beyond [`MAX_PAGES`] are left unused.
    pub fn new(pages: &'m mut [Page<'b>], table: &'m mut [u32]) -> Self {
        table.fill(ABSENT);
        let count = pages.len().min(MAX_PAGES);
        Self {
            pages: &mut pages[..count],
            table,
            hand: 0,
            used: 0,
            evictions: 0,
        }
    }

    /// Takes `pages` instead of the current ones (none may be lent out): everything cached
    /// before is forgotten.
    pub fn replace_pages(&mut self, pages: &'m mut [Page<'b>]) {
        for slot in self.table.iter_mut() {
            if !matches!(*slot, QUEUED | READING | FAILED) {
                *slot = ABSENT;
            }
        }
        for page in pages.iter_mut() {
            page.used = false;
            page.referenced = false;
        }
        let count = pages.len().min(MAX_PAGES);
        self.pages = &mut pages[..count];
        self.hand = 0;
        self.used = 0;
    }

    /// Entries in the segment table.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Pages holding a segment.
    pub fn used_pages(&self) -> usize {
        self.used
    }

    /// Segments pushed out to make room so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The state of `segment` (`Absent` for one outside the table).
    pub fn state(&self, segment: u32) -> SegmentState {
        match self.table.get(segment as usize).copied() {
            None | Some(ABSENT) => SegmentState::Absent,
            Some(QUEUED) => SegmentState::Queued,
            Some(READING) => SegmentState::Reading,
            Some(FAILED) => SegmentState::Failed,
            Some(page) => SegmentState::Cached(page as usize - 1),
        }
    }

    /// Sets the state of `segment` to one without a page.
    pub fn mark(&mut self, segment: u32, state: SegmentState) {
        let value = match state {
            SegmentState::Absent => ABSENT,
            SegmentState::Queued => QUEUED,
            SegmentState::Reading => READING,
            SegmentState::Failed => FAILED,
            SegmentState::Cached(_) => return,
        };
        if let Some(slot) = self.table.get_mut(segment as usize) {
            *slot = value;
        }
    }

    /// The bytes of `segment` if it is cached, and whether they passed the segment's
    /// checksum.
    pub fn get(&self, segment: u32) -> Option<(&[u8], bool)> {
        let SegmentState::Cached(page) = self.state(segment) else {
            return None;
        };
        let page = self.pages.get(page)?;
        Some((page.memory.as_deref()?, page.verified))
    }

    /// Frees the page of `segment` (if cached): the segment becomes absent.
    pub fn drop_segment(&mut self, segment: u32) {
        if let SegmentState::Cached(at) = self.state(segment)
            && let Some(page) = self.pages.get_mut(at)
        {
            page.used = false;
            page.referenced = false;
            self.used -= 1;
            self.table[segment as usize] = ABSENT;
        }
    }

    /// Marks the page of `segment` (if cached) as used again: a new response asked for it.
    pub fn touch(&mut self, segment: u32) {
        if let SegmentState::Cached(page) = self.state(segment)
            && let Some(page) = self.pages.get_mut(page)
        {
            page.referenced = true;
        }
    }

    /// A page for a new segment, taking its memory out (to lend it to the card): a free page
    /// if there is one, otherwise the CLOCK victim, whose segment becomes absent. With
    /// `free_only` (idle warm-up) no segment is pushed out. `None` when no page can be had
    /// (all lent out, or none free with `free_only`).
    pub fn take_page(&mut self, free_only: bool) -> Option<(usize, &'b mut [u8])> {
        let count = self.pages.len();
        if count == 0 || (free_only && self.used >= count) {
            return None;
        }
        // Two turns of the hand clear every referenced bit once and then find a victim.
        for _ in 0..count.saturating_mul(2) {
            let at = self.hand;
            self.hand = (self.hand + 1) % count;
            let page = &mut self.pages[at];
            if page.memory.is_none() {
                continue; // lent out for a read
            }
            if page.used {
                if free_only {
                    continue;
                }
                if page.referenced {
                    page.referenced = false;
                    continue;
                }
                let segment = page.segment;
                page.used = false;
                self.used -= 1;
                self.evictions += 1;
                if let Some(slot) = self.table.get_mut(segment as usize)
                    && *slot == at as u32 + 1
                {
                    *slot = ABSENT;
                }
            }
            let memory = self.pages[at].memory.take()?;
            return Some((at, memory));
        }
        None
    }

    /// Gives a page's memory back after a read: with `segment` in it (now cached; `verified`
    /// when it passed its checksum), or empty.
    pub fn return_page(
        &mut self,
        page: usize,
        memory: &'b mut [u8],
        segment: Option<u32>,
        verified: bool,
    ) {
        let Some(slot) = self.pages.get_mut(page) else {
            return;
        };
        slot.memory = Some(memory);
        match segment {
            Some(segment) if (segment as usize) < self.table.len() => {
                slot.segment = segment;
                slot.used = true;
                slot.verified = verified;
                // No second chance until a later response asks for it again: a file streamed
                // once goes before pages that are asked for repeatedly.
                slot.referenced = false;
                self.used += 1;
                self.table[segment as usize] = page as u32 + 1;
            }
            _ => {}
        }
    }

    /// Forgets every segment in `range` of the table: their pages are freed and their entries
    /// (cached, queued, being read or failed) become absent. A site the store stops serving
    /// leaves nothing behind that a later site using the same entries could be served from.
    pub fn drop_range(&mut self, range: core::ops::Range<u32>) {
        for page in self.pages.iter_mut() {
            if page.used && range.contains(&page.segment) {
                page.used = false;
                page.referenced = false;
                self.used -= 1;
            }
        }
        let start = (range.start as usize).min(self.table.len());
        let end = (range.end as usize).clamp(start, self.table.len());
        self.table[start..end].fill(ABSENT);
    }

    /// Drops every cached segment (pages lent out for a read stay lent).
    pub fn clear(&mut self) {
        for (at, page) in self.pages.iter_mut().enumerate() {
            if page.used {
                page.used = false;
                page.referenced = false;
                if let Some(slot) = self.table.get_mut(page.segment as usize)
                    && *slot == at as u32 + 1
                {
                    *slot = ABSENT;
                }
            }
        }
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn pages(memory: &mut [u8], len: usize) -> Vec<Page<'_>> {
        memory.chunks_exact_mut(len).map(Page::new).collect()
    }

    #[test]
    fn fills_free_pages_then_evicts_by_clock() {
        let mut memory = vec![0u8; 4 * 16];
        let mut pages = pages(&mut memory, 16);
        let mut table = vec![0u32; 10];
        let mut cache = SegmentCache::new(&mut pages, &mut table);
        for segment in 0..4 {
            let (page, memory) = cache.take_page(true).unwrap();
            memory[0] = segment as u8;
            cache.return_page(page, memory, Some(segment), true);
        }
        assert_eq!(cache.used_pages(), 4);
        assert!(cache.take_page(true).is_none(), "warm-up never evicts");
        // Segments 1 and 2 are asked for again: 0 goes first, then 3.
        assert_eq!(cache.get(1).unwrap().0[0], 1);
        cache.touch(1);
        cache.touch(2);
        let (page, memory) = cache.take_page(false).unwrap();
        assert_eq!(cache.state(0), SegmentState::Absent);
        cache.return_page(page, memory, Some(4), true);
        let (page, memory) = cache.take_page(false).unwrap();
        assert_eq!(cache.state(3), SegmentState::Absent);
        cache.return_page(page, memory, Some(5), true);
        assert!(matches!(cache.state(1), SegmentState::Cached(_)));
        assert!(matches!(cache.state(2), SegmentState::Cached(_)));
        assert_eq!(cache.evictions(), 2);
    }

    #[test]
    fn pages_lent_out_are_never_handed_out_twice() {
        let mut memory = vec![0u8; 2 * 8];
        let mut pages = pages(&mut memory, 8);
        let mut table = vec![0u32; 4];
        let mut cache = SegmentCache::new(&mut pages, &mut table);
        let first = cache.take_page(false).unwrap();
        let second = cache.take_page(false).unwrap();
        assert_ne!(first.0, second.0);
        assert!(cache.take_page(false).is_none());
        cache.return_page(first.0, first.1, None, false);
        assert!(cache.take_page(false).is_some());
    }

    #[test]
    fn a_dropped_range_frees_its_pages_and_keeps_the_rest() {
        let mut memory = vec![0u8; 3 * 8];
        let mut pages = pages(&mut memory, 8);
        let mut table = vec![0u32; 10];
        let mut cache = SegmentCache::new(&mut pages, &mut table);
        for segment in [1, 6, 7] {
            let (page, memory) = cache.take_page(true).unwrap();
            cache.return_page(page, memory, Some(segment), true);
        }
        cache.mark(5, SegmentState::Queued);
        cache.drop_range(5..10);
        assert!(matches!(cache.state(1), SegmentState::Cached(_)));
        for segment in 5..10 {
            assert_eq!(cache.state(segment), SegmentState::Absent);
        }
        assert_eq!(cache.used_pages(), 1);
        // The freed pages are handed out again without evicting segment 1.
        assert!(cache.take_page(true).is_some());
        assert!(cache.take_page(true).is_some());
        assert!(matches!(cache.state(1), SegmentState::Cached(_)));
        cache.drop_range(8..99); // past the table: clamped
    }

    #[test]
    fn states_round_trip_and_clear_empties() {
        let mut memory = vec![0u8; 8];
        let mut pages = pages(&mut memory, 8);
        let mut table = vec![0u32; 3];
        let mut cache = SegmentCache::new(&mut pages, &mut table);
        for state in [
            SegmentState::Queued,
            SegmentState::Reading,
            SegmentState::Failed,
            SegmentState::Absent,
        ] {
            cache.mark(1, state);
            assert_eq!(cache.state(1), state);
        }
        assert_eq!(cache.state(99), SegmentState::Absent);
        cache.mark(99, SegmentState::Queued); // outside: ignored
        let (page, memory) = cache.take_page(true).unwrap();
        cache.return_page(page, memory, Some(2), true);
        assert_eq!(cache.state(2), SegmentState::Cached(0));
        cache.clear();
        assert_eq!(cache.state(2), SegmentState::Absent);
        assert_eq!(cache.used_pages(), 0);
        assert!(cache.get(2).is_none());
    }
}
