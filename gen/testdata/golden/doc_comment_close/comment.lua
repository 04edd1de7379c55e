-- Comment has */ in its doc, and /* too; neither may end or start a Go
-- comment. A line that is only */ follows:
-- */
--
-- @script comment
-- @key k       a key named like /* this */
-- @arg a int   closes */ early
-- @return r string   */
return {'*/'}
