//! A buddy allocator over page numbers: blocks of 2^order pages, aligned to their size.

const NONE: u32 = u32::MAX;
const NOT_FREE: u8 = u8::MAX;

pub(crate) struct Buddy {
    pages: u32,
    max_order: u32,
    /// Head of the free list of each order.
    heads: Vec<u32>,
    /// Doubly linked free lists threaded through the first page of each free block.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For the first page of a free block: its order; `NOT_FREE` otherwise.
    free_order: Vec<u8>,
}

impl Buddy {
    pub(crate) fn new(pages: u32) -> Buddy {
        assert!(pages > 0);
        let max_order = 31 - pages.leading_zeros();
        let mut buddy = Buddy {
            pages,
            max_order,
            heads: vec![NONE; max_order as usize + 1],
            next: vec![NONE; pages as usize],
            prev: vec![NONE; pages as usize],
            free_order: vec![NOT_FREE; pages as usize],
        };
        // Carve the range into the largest aligned blocks that fit.
        let mut page = 0u32;
        while page < pages {
            let mut order = max_order;
            while !page.is_multiple_of(1 << order) || page + (1 << order) > pages {
                order -= 1;
            }
            buddy.push(page, order);
            page += 1 << order;
        }
        buddy
    }

    pub(crate) fn max_order(&self) -> u32 {
        self.max_order
    }

    /// First page of a free block of `2^order` pages, or `None`.
    pub(crate) fn alloc(&mut self, order: u32) -> Option<u32> {
        if order > self.max_order {
            return None;
        }
        let mut found = order;
        while self.heads[found as usize] == NONE {
            found += 1;
            if found > self.max_order {
                return None;
            }
        }
        let page = self.heads[found as usize];
        self.remove(page, found);
        while found > order {
            found -= 1;
            self.push(page + (1 << found), found);
        }
        Some(page)
    }

    pub(crate) fn free(&mut self, mut page: u32, mut order: u32) {
        assert!(page + (1 << order) <= self.pages);
        assert_eq!(
            self.free_order[page as usize], NOT_FREE,
            "double free of page {page}"
        );
        while order < self.max_order {
            let buddy = page ^ (1 << order);
            let fits = buddy + (1 << order) <= self.pages;
            if !fits || u32::from(self.free_order[buddy as usize]) != order {
                break;
            }
            self.remove(buddy, order);
            page = page.min(buddy);
            order += 1;
        }
        self.push(page, order);
    }

    fn push(&mut self, page: u32, order: u32) {
        let head = self.heads[order as usize];
        self.next[page as usize] = head;
        self.prev[page as usize] = NONE;
        if head != NONE {
            self.prev[head as usize] = page;
        }
        self.heads[order as usize] = page;
        self.free_order[page as usize] = u8::try_from(order).expect("order fits u8");
    }

    fn remove(&mut self, page: u32, order: u32) {
        assert_eq!(u32::from(self.free_order[page as usize]), order);
        let (next, prev) = (self.next[page as usize], self.prev[page as usize]);
        if prev == NONE {
            self.heads[order as usize] = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next != NONE {
            self.prev[next as usize] = prev;
        }
        self.free_order[page as usize] = NOT_FREE;
    }
}
