//! The layout layer: a file spread over component objects by its geometry (seed 002 §3.3's
//! striping clerk). A one-object layout is its component itself.

use crate::component::ComponentIo;
use crate::layer::FileIo;
use nasd_proto::manager::Layout;
use std::sync::Arc;

/// The layout layer for `layout` over `components` (one per component object, in order);
/// `size` is the file's size as the manager keeps it for layouts spread over several objects.
pub fn stack(
    layout: &Layout,
    mut components: Vec<ComponentIo>,
    size: u64,
) -> Result<Arc<dyn FileIo>, String> {
    let _ = size;
    match layout.geometry.as_str() {
        "single" if components.len() == 1 => Ok(Arc::new(components.remove(0))),
        g => Err(format!("layout {g} is not supported by this client")),
    }
}
